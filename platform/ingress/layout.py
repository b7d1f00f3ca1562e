"""Where one nginx instance keeps its files, all under its state directory.

The one place that knows the layout: the process adapter (``nginx.py``), the
renderer's view (``view.RuntimePaths``), the launcher and ``platformctl`` all
ask ``NginxFiles`` instead of joining names themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NginxFiles:
    state_dir: Path

    @property
    def conf(self) -> Path:
        return self.state_dir / "nginx.conf"

    @property
    def candidate(self) -> Path:
        return self.state_dir / "nginx.conf.candidate"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "nginx.pid"

    @property
    def error_log(self) -> Path:
        return self.state_dir / "logs" / "error.log"

    @property
    def access_log(self) -> Path:
        return self.state_dir / "logs" / "access.log"

    @property
    def temp_dir(self) -> Path:
        return self.state_dir / "tmp"

    @property
    def socket(self) -> Path:
        return self.state_dir / "nginx-config.sock"

    def prepare(self) -> None:
        for directory in (self.error_log.parent, self.temp_dir):
            directory.mkdir(parents=True, exist_ok=True)
