"""supervisord event listener: counts restarts and stops the supervisor on FATAL.

- Every ``PROCESS_STATE_STARTING`` of a program is counted in
  ``<state dir>/starts.json`` (the health server reports ``restarts`` as
  starts minus one; supervisord itself keeps no such counter).
- A program is FATAL when it kept exiting during its start retries. Carrying
  on without it would leave a half-working pod, so the listener writes which
  program failed to the marker file (``platformd.supervise`` reads it to exit
  1) and sends SIGTERM to supervisord, which stops the others gracefully.

Protocol (supervisor's eventlistener): write READY, read a header line and a
payload of ``len`` bytes, write ``RESULT 2\\nOK``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="platformd-fatalwatch")
    parser.add_argument("--marker", required=True, type=Path)
    parser.add_argument("--starts", required=True, type=Path)
    args = parser.parse_args(argv)
    stdin, stdout = sys.stdin, sys.stdout
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
            args.marker.write_text(name + "\n")
            print(f"fatal-watch: program {name} is FATAL; stopping supervisord", file=sys.stderr, flush=True)
            os.kill(os.getppid(), signal.SIGTERM)
        stdout.write("RESULT 2\nOK")
        stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
