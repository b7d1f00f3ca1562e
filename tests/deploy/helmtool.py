"""A thin adapter around the real Helm v3 binary for the chart tests.

Only two verbs are needed, ``lint`` and ``template``; both run the binary that
``scripts/setup.sh`` extracts to ``.cache/tools/helm``. Rendered output is
returned as plain parsed YAML documents (dicts), in the order Helm printed them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / ".cache" / "tools" / "helm"
CHART = REPO / "deploy" / "helm" / "platform"
CI_VALUES = CHART / "ci"

RELEASE = "edge"
NAMESPACE = "platform-system"


class HelmError(Exception):
    """helm exited non-zero; the message carries its output."""


@dataclass(frozen=True)
class Helm:
    binary: Path

    def run(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "HELM_CACHE_HOME": "/tmp/helm-test-cache",
                 "HELM_CONFIG_HOME": "/tmp/helm-test-config", "HELM_DATA_HOME": "/tmp/helm-test-data"},
        )
        if proc.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def version(self) -> str:
        return self.run("version", "--short").strip()

    def lint(self, chart: Path, values: list[Path] = (), sets: list[str] = ()) -> str:
        return self.run("lint", "--strict", str(chart), *_value_args(values, sets))

    def template(self, chart: Path = CHART, values: list[Path] = (), sets: list[str] = (),
                 kube_version: str | None = None, release: str = RELEASE,
                 namespace: str = NAMESPACE) -> list[dict]:
        args = ["template", release, str(chart), "--namespace", namespace]
        if kube_version:
            args += ["--kube-version", kube_version]
        out = self.run(*args, *_value_args(values, sets))
        return [doc for doc in yaml.safe_load_all(out) if doc]


def _value_args(values, sets) -> list[str]:
    args: list[str] = []
    for path in values:
        args += ["--values", str(path)]
    for item in sets:
        args += ["--set", item]
    return args


def find_helm() -> Helm:
    """The project's Helm binary; raise with set-up instructions when absent."""
    if not (HELM.is_file() and HELM.stat().st_mode & 0o111):
        raise FileNotFoundError(
            f"Helm v3 binary not found at {HELM.relative_to(REPO)}; "
            "run `make setup` (scripts/setup.sh extracts it) before these tests")
    return Helm(HELM)


def scenarios() -> dict[str, Path]:
    """The chart-testing values files under ci/, by scenario name."""
    return {p.name.removesuffix("-values.yaml"): p for p in sorted(CI_VALUES.glob("*-values.yaml"))}


# --- queries on rendered documents ------------------------------------------

def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def workloads(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d.get("kind") in ("Deployment", "DaemonSet")]


def component_of(obj: dict) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def workload(docs: list[dict], component: str) -> dict:
    found = [w for w in workloads(docs) if component_of(w) == component]
    assert len(found) == 1, f"expected one workload for {component}, found {len(found)}"
    return found[0]


def container(work: dict) -> dict:
    containers = work["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def parse_args(args: list[str]) -> dict[str, str | bool]:
    """``--flag=value`` -> {"flag": "value"}; a bare ``--flag`` -> {"flag": True}."""
    parsed: dict[str, str | bool] = {}
    for arg in args:
        assert arg.startswith("--"), f"positional argument {arg!r}"
        name, sep, value = arg[2:].partition("=")
        assert name not in parsed, f"flag --{name} given twice"
        parsed[name] = value if sep else True
    return parsed
