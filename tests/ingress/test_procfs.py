"""procfs: titles and stat fields of live, zombie and gone processes."""

from __future__ import annotations

import os
import shutil
import subprocess

from platformd.ingress import procfs
from tests.helpers.waiting import wait_for


def test_title_and_parent_of_a_process_whose_name_has_spaces_and_parens(tmp_path):
    odd = tmp_path / "a) b (c"  # the command name in stat is "(a) b (c)"
    odd.symlink_to(shutil.which("sleep"))
    child = subprocess.Popen([str(odd), "30"])
    try:
        assert wait_for(lambda: procfs.title(child.pid) == f"{odd} 30", timeout=5)
        fields = procfs.stat_fields(child.pid)
        assert fields is not None and fields[0] in "RSD" and int(fields[1]) == os.getpid()
    finally:
        child.kill()
        child.wait()


def test_a_zombie_shows_state_z_and_a_gone_process_none():
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert procfs.stat_fields(child.pid)[0] == "Z"
    child.wait()
    assert procfs.stat_fields(child.pid) is None
    assert procfs.title(child.pid) == ""
