"""The chart's container args, given to the real ``platformd --role``.

``platformd --role X --print-config`` parses the args exactly as the
container's entry point does (its own flags, then routing every other flag to
the programs whose parsers know it: an unknown flag is an error) and prints
the supervisord configuration instead of starting it. So a flag the chart
renders that the code does not take fails here, without a cluster or image.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from . import helmtool
from .helmtool import container

SCENARIOS = sorted(helmtool.scenarios())
ROLE_MODULES = {"ingress": ["platformd.ingress.main"], "nodeproxy": ["platformd.nodeproxy.main"]}
# platformd's own flags (platformd.supervise); consumed, not passed to programs.
PLATFORMD_FLAGS = {"--state-dir", "--log-format", "--health-address", "--health-port", "--healthz-port"}
# What the kubelet substitutes for $(VAR) from the downward API.
DOWNWARD = {"$(NODE_NAME)": "node-a", "$(NODE_IP)": "192.0.2.21"}


def kubelet_expand(arg: str) -> str:
    for ref, value in DOWNWARD.items():
        arg = arg.replace(ref, value)
    return arg


def run_print_config(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    argv = [kubelet_expand(a) for a in args]
    # The container's state dir may not exist here; print-config writes nothing.
    argv = [a for a in argv if not a.startswith("--state-dir=")] + [f"--state-dir={tmp_path}", "--print-config"]
    return subprocess.run([sys.executable, "-m", "platformd.cli", *argv],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def program_commands(config: str) -> dict[str, str]:
    programs, current = {}, None
    for line in config.splitlines():
        if line.startswith("[program:"):
            current = line[len("[program:"):-1]
        elif current and line.startswith("command="):
            programs[current] = line[len("command="):]
    return programs


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_platformd_accepts_the_rendered_args(rendered, scenario, tmp_path):
    not_yet = []
    for work in helmtool.workloads(rendered(scenario)):
        args = container(work)["args"]
        role = args[0].removeprefix("--role=")
        missing = [m for m in ROLE_MODULES[role] if importlib.util.find_spec(m) is None]
        if missing:
            not_yet += missing
            continue
        proc = run_print_config(args, tmp_path)
        assert proc.returncode == 0, f"platformd rejected the {role} args of {scenario}:\n{proc.stderr}"
        commands = program_commands(proc.stdout)
        assert role in commands
        # Every component flag reached the component's program.
        for arg in args[1:]:
            flag = kubelet_expand(arg)
            if flag.split("=")[0] in PLATFORMD_FLAGS:
                continue
            assert flag in commands[role], f"{flag} did not reach the {role} program"
    if not_yet:
        pytest.skip(f"{', '.join(not_yet)} not written yet: those args are unchecked")
