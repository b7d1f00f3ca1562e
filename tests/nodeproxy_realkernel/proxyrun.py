"""The node proxy run in a thread of the test's namespace, for the
end-to-end fixtures (IPVS, IPVS dual-stack, nftables).

Started from the fixture's thread, so it (and every thread it starts) lives
in the fixture's network namespace too.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from platformd.nodeproxy.main import run


class RunningProxy:
    def __init__(self, args, kernel, name: str, **kwargs) -> None:
        self._stop = threading.Event()
        self._outcome: dict = {}
        self._thread = threading.Thread(
            target=lambda: self._outcome.setdefault("status", run(args, kernel, self._stop, **kwargs)),
            name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop it and check it stopped cleanly (exit status 0)."""
        self._stop.set()
        self._thread.join(20)
        assert not self._thread.is_alive(), "the node proxy did not stop"
        assert self._outcome.get("status") == 0, f"the node proxy exited with {self._outcome.get('status')}"


@contextlib.contextmanager
def proxy_running(args, kernel, name: str = "nodeproxy", **kwargs) -> Iterator[RunningProxy]:
    """``run(args, kernel, stop, **kwargs)`` in a thread; stopped (and checked)
    on leaving, or only stopped when leaving on an error."""
    proxy = RunningProxy(args, kernel, name, **kwargs)
    try:
        yield proxy
    except BaseException:
        proxy._stop.set()
        proxy._thread.join(20)
        raise
    proxy.stop()
