"""A program that cannot run makes `platformd --role` exit non-zero (so the pod restarts)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.supervisor.conftest import free_port


def test_crash_looping_program_ends_platformd_with_non_zero_exit(tmp_path):
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "platformd.cli", "--role", "nodeproxy",
         "--state-dir", str(tmp_path / "state"), "--health-port", str(free_port()),
         "--kubeconfig", str(tmp_path / "missing-kubeconfig"),
         "--healthz-bind-address", f"127.0.0.1:{free_port()}",
         "--metrics-bind-address", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=150,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "fatal-watch: program nodeproxy" in proc.stderr
    assert "program nodeproxy went FATAL" in proc.stderr or "nodeproxy" in proc.stderr.splitlines()[-1]
    # supervisord's restart delays are 1 s, 2 s, 3 s, ...: five failures take
    # roughly 15-30 s here; far below the 120 s crash-loop window.
    assert elapsed < 120


def test_unknown_flag_for_the_role_is_refused_before_anything_starts(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "platformd.cli", "--role", "nodeproxy", "--state-dir", str(tmp_path),
         "--ingress-class", "x"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "platformd: unknown flag --ingress-class for role with programs nodeproxy"
    assert not (tmp_path / "supervisord.conf").exists()


def test_missing_kubeconfig_ends_the_ingress_role_at_once(tmp_path):
    """A configuration error a restart cannot fix stops the role on the first
    exit, with the one line, instead of five restarts (EXIT_CONFIG, fatalwatch)."""
    state = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "platformd.cli", "--role", "ingress", "--state-dir", str(state),
         "--health-port", str(free_port()), "--health-address", "127.0.0.1",
         "--ingress-internal-port", str(free_port()), "--http-port", str(free_port()),
         "--https-port", str(free_port()), "--kubeconfig", str(tmp_path / "missing-kubeconfig")],
        capture_output=True, text=True, timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert f"ingress: kubeconfig {tmp_path / 'missing-kubeconfig'}: no such file" in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "platformd: program ingress stopped on a configuration error a restart cannot fix; exiting 1")
    starts = json.loads((state / "starts.json").read_text())
    assert starts["ingress"] <= 2, starts          # not supervisord's 1 + 5 retries
    # The control socket asks for a password, so supervisord raises no alarm about it.
    assert "CRIT" not in out and "authentication checking" not in out
