from __future__ import annotations

import pytest

from . import helmtool


@pytest.fixture(scope="session")
def helm() -> helmtool.Helm:
    """The real Helm binary. Absent means the set-up did not run: fail, never skip."""
    try:
        return helmtool.find_helm()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def rendered(helm):
    """Rendered documents per ci/ scenario, rendered once per session."""
    cache: dict[str, list[dict]] = {}

    def render(scenario: str) -> list[dict]:
        if scenario not in cache:
            cache[scenario] = helm.template(values=[helmtool.scenarios()[scenario]])
        return cache[scenario]

    return render
