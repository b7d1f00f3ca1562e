"""Run a program that cannot tag its own log lines (nginx) and tag them.

    python -m platformd.logpipe --name nginx [--format json] -- nginx -g 'daemon off;' ...

Every line the child writes to stdout or stderr is re-emitted on the same
stream of this process as one record with the program's name (text or JSON),
so the container log says which program spoke. Signals that supervisord sends
(TERM, QUIT, HUP, INT, USR1, USR2, WINCH) are passed to the child unchanged, so
``stopsignal=QUIT`` still makes nginx drain; this process exits with the
child's status (128+signal when the child was killed), so supervisord sees a
crash of the child as a crash of the program.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

FORWARDED_SIGNALS = (
    signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGINT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH,
)


def tag_line(name: str, stream: str, line: str, fmt: str) -> str:
    """One output record for one line of the child (pure, for tests)."""
    line = line.rstrip("\r\n")
    if fmt == "json":
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        return json.dumps({"time": stamp + "Z", "program": name, "stream": stream, "message": line},
                          sort_keys=True)
    return f"{name} {stream}: {line}"


def _pump(pipe, out, name: str, stream: str, fmt: str) -> None:
    with pipe:
        for raw in iter(pipe.readline, b""):
            out.write(tag_line(name, stream, raw.decode("utf-8", "replace"), fmt) + "\n")
            out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="platformd-logpipe")
    parser.add_argument("--name", required=True)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required after --")

    # Our handlers go in before the child starts, and the signals are
    # unblocked: whatever this process inherited (SIGQUIT ignored under
    # ``nohup ... &``, a blocked mask), the child then starts with the default
    # disposition of each (exec resets handled signals to default) and we
    # can forward them. One arriving before the child exists is dropped.
    started: list[subprocess.Popen] = []
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda s, _f: started and started[0].send_signal(s))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started.append(child)
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout, args.name, "stdout", args.format), daemon=True),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr, args.name, "stderr", args.format), daemon=True),
    ]
    for p in pumps:
        p.start()
    status = child.wait()
    # Children of the child (nginx workers orphaned by a killed master) may
    # hold the pipes open for a long time; flush what is there and go, so
    # supervisord restarts the program at once.
    for p in pumps:
        p.join(timeout=0.1)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main())
