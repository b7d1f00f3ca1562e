"""Where one nginx instance keeps its files, all under its state directory.

The one place that knows the layout: the process adapter (``nginx.py``), the
renderer's view (``view.RuntimePaths``), the launcher and ``platformctl`` all
ask ``NginxFiles`` instead of joining names themselves.

The configuration socket is the data plane's control channel: whoever can
connect to it can move any host to any backend. nginx creates it ``0666``
(the umask of the master), so it lives in ``private/``, a directory only
our user may enter (``0700``, owned by us), inside a state directory no
other user may write to (or that is sticky, like ``/tmp``): a directory
another user could rename or replace would make the mode moot.
``prepare()`` creates and checks that at every start and raises
``UnsafeLayout`` rather than run with a socket others can reach.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


class UnsafeLayout(OSError):
    """The state directory would let another local user reach the data plane."""


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
    def private_dir(self) -> Path:
        """Only our user may enter it (see the module docstring)."""
        return self.state_dir / "private"

    @property
    def lane_files(self) -> Path:
        """Files that generated lanes name (CA bundles, client keys): lanes.py."""
        return self.private_dir / "lanes"

    @property
    def socket(self) -> Path:
        return self.private_dir / "nginx-config.sock"

    def prepare(self) -> None:
        """Create the directories nginx needs; raises ``UnsafeLayout`` (see above)."""
        for directory in (self.error_log.parent, self.temp_dir):
            directory.mkdir(parents=True, exist_ok=True)
        private = self.private_dir
        private.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(private)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise UnsafeLayout(f"{private} is not a directory owned by uid {os.geteuid()}; "
                               "refusing to put the configuration socket there")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(private, 0o700)
        check_not_shared(self.state_dir)


def check_not_shared(directory: Path) -> None:
    """Raise ``UnsafeLayout`` if another user could replace entries of ``directory``.

    Group- or world-writable is refused unless the sticky bit is set (then
    only an entry's owner may rename or remove it).
    """
    st = os.stat(directory)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise UnsafeLayout(f"{directory} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}); "
                           "refusing to keep the data plane's configuration socket below it")
