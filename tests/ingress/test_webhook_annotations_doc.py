"""docs/annotations.md says what the parser and the admission webhook do with each annotation.

Each row's "Today" is checked against the code: "supported" rows are exactly
``annotations.PARSERS``; a "refused" annotation makes the webhook deny an
Ingress that carries it; an "ignored" one is allowed with a warning naming
it. So the table cannot drift from the parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from platformd.ingress.annotations import PARSERS
from tests.ingress.test_webhook_review import Cluster, web_ingress

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotations.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (supported|refused|ignored) \|(.*)\|(.*)\|$")


def rows() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            match = ROW.match(line)
            assert match, f"malformed row in {DOC.name}: {line}"
            name, status = match.group(1), match.group(2)
            assert name not in found, f"{name} listed twice"
            found[name] = status
    return found


ROWS = rows()


def test_supported_rows_are_exactly_the_parser_table():
    assert {name for name, status in ROWS.items() if status == "supported"} == set(PARSERS)


def test_every_documented_annotation_is_a_row():
    assert len(ROWS) >= 150  # ingress-nginx's 136 current annotations and the older names


@pytest.mark.parametrize("name", sorted(n for n, s in ROWS.items() if s != "supported"))
def test_the_webhook_answers_as_the_table_says(name):
    verdict = Cluster().review("CREATE", web_ingress("a", annotations={name: "on"}))
    if ROWS[name] == "refused":
        assert not verdict.allowed and name in verdict.errors[0]
    else:
        assert verdict.allowed and any(name in w for w in verdict.warnings)
