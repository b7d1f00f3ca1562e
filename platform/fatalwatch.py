"""supervisord event listener: counts restarts and stops the supervisor on FATAL.

- Every ``PROCESS_STATE_STARTING`` of a program is counted in
  ``<state dir>/starts.json`` (the health server reports ``restarts`` as
  starts minus one; supervisord itself keeps no such counter).
- A program is FATAL when it kept exiting during its start retries. Carrying
  on without it would leave a half-working pod, so the listener writes which
  program failed to the marker file (``platformd.supervise`` reads it to exit
  1) and sends SIGTERM to supervisord, which stops the others gracefully.
- supervisord only calls a program FATAL when it dies within ``startsecs``;
  one that runs a few seconds and then crashes is restarted for ever. Such a
  crash loop is treated as FATAL too: ``CRASH_LOOP_EXITS`` unexpected exits
  within ``CRASH_LOOP_WINDOW`` seconds (5 in 120 s: a single kill or a
  restart during a rollout stays far below; a program that cannot work hits
  it within a minute, given supervisord's 1 s, 2 s, 3 s... restart delays).

- A program that exits with ``EXIT_CONFIG`` (a missing or bad kubeconfig:
  a restart cannot fix it) records its name in the ``--config-error`` file
  (``platformd.cli``); at the program's next exit or backoff event the
  listener gives up at once, instead of after supervisord's five start
  retries (27 s of restarts that cannot succeed).

Protocol (supervisor's eventlistener): write READY, read a header line and a
payload of ``len`` bytes, write ``RESULT 2\\nOK``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import defaultdict, deque
from pathlib import Path

CRASH_LOOP_EXITS = 5
CRASH_LOOP_WINDOW = 120.0


class CrashLoopDetector:
    """Counts unexpected exits per program in a sliding window."""

    def __init__(self, exits: int = CRASH_LOOP_EXITS, window: float = CRASH_LOOP_WINDOW) -> None:
        self._exits = exits
        self._window = window
        self._times: dict[str, deque[float]] = defaultdict(deque)

    def exited(self, program: str, now: float) -> bool:
        """Record an unexpected exit; True when the program is crash-looping."""
        times = self._times[program]
        times.append(now)
        while times and now - times[0] > self._window:
            times.popleft()
        return len(times) >= self._exits


def parse_tokens(line: str) -> dict[str, str]:
    return dict(token.split(":", 1) for token in line.split() if ":" in token)


def record_start(counts_file: Path, program: str) -> None:
    try:
        counts = json.loads(counts_file.read_text())
    except (OSError, ValueError):
        counts = {}
    counts[program] = int(counts.get(program, 0)) + 1
    tmp = counts_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(counts, sort_keys=True))
    tmp.replace(counts_file)  # readers never see a half-written file


def _give_up(marker: Path, program: str, why: str) -> None:
    marker.write_text(f"{program}\n{why}\n")
    print(f"fatal-watch: program {program} {why}; stopping supervisord", file=sys.stderr, flush=True)
    os.kill(os.getppid(), signal.SIGTERM)


def _config_error(path: Path | None, program: str) -> bool:
    try:
        return path is not None and program in path.read_text().split()
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="platformd-fatalwatch")
    parser.add_argument("--marker", required=True, type=Path)
    parser.add_argument("--starts", required=True, type=Path)
    parser.add_argument("--config-error", type=Path, help="where programs record an EXIT_CONFIG exit")
    args = parser.parse_args(argv)
    stdin, stdout = sys.stdin, sys.stdout
    crash_loops = CrashLoopDetector()
    while True:
        stdout.write("READY\n")
        stdout.flush()
        line = stdin.readline()
        if not line:
            return 0
        header = parse_tokens(line)
        payload = parse_tokens(stdin.read(int(header.get("len", "0"))).split("\n", 1)[0])
        name = payload.get("processname", "?")
        event = header.get("eventname")
        if event == "PROCESS_STATE_STARTING":
            record_start(args.starts, name)
        elif event == "PROCESS_STATE_FATAL":
            _give_up(args.marker, name, "went FATAL")
        elif event in ("PROCESS_STATE_BACKOFF", "PROCESS_STATE_EXITED") and _config_error(args.config_error, name):
            _give_up(args.marker, name, "stopped on a configuration error a restart cannot fix")
        elif event == "PROCESS_STATE_EXITED" and payload.get("expected") == "0":
            if crash_loops.exited(name, time.monotonic()):
                _give_up(args.marker, name, f"crashed {CRASH_LOOP_EXITS} times in {CRASH_LOOP_WINDOW:.0f} s")
        stdout.write("RESULT 2\nOK")
        stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
