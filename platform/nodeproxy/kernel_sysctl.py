"""Kernel parameters on Linux: :class:`~.kernel.Sysctl` through ``/proc/sys``
(of the calling thread's network namespace)."""

from __future__ import annotations

import errno
from pathlib import Path

from .kernel import KernelError, NotFound

__all__ = ["LinuxSysctl"]

_SYSCTL_ROOT = Path("/proc/sys")


class LinuxSysctl:
    """:class:`~.kernel.Sysctl` on the running kernel."""

    @staticmethod
    def _sysctl_path(name: str) -> Path:
        if name.startswith("/") or ".." in name.split("/"):
            raise KernelError(f"invalid sysctl name {name!r}", errno.EINVAL)
        return _SYSCTL_ROOT / name

    def read_sysctl(self, name: str) -> str:
        try:
            return self._sysctl_path(name).read_text().strip()
        except FileNotFoundError:
            raise NotFound(f"sysctl {name} not found") from None
        except OSError as exc:
            raise KernelError(f"reading sysctl {name}: {exc.strerror}", exc.errno) from exc

    def write_sysctl(self, name: str, value: str) -> None:
        path = self._sysctl_path(name)
        try:
            with open(path, "w") as f:
                f.write(f"{value}\n")
        except FileNotFoundError:
            raise NotFound(f"sysctl {name} not found") from None
        except OSError as exc:
            raise KernelError(f"writing sysctl {name}: {exc.strerror}", exc.errno) from exc

