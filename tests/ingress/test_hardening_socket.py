"""#15: only the controller's user may reach Lua's configuration socket."""

from __future__ import annotations

import os
import stat

import pytest

from platformd.ingress.layout import NginxFiles, UnsafeLayout


def test_the_socket_lives_in_a_private_directory(tmp_path):
    files = NginxFiles(tmp_path)
    files.prepare()
    assert files.socket.parent == files.private_dir
    st = os.stat(files.private_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


def test_a_loosened_private_directory_is_tightened_again(tmp_path):
    files = NginxFiles(tmp_path)
    files.private_dir.mkdir()
    os.chmod(files.private_dir, 0o777)
    files.prepare()
    assert stat.S_IMODE(os.stat(files.private_dir).st_mode) == 0o700


def test_a_world_writable_state_dir_is_refused(tmp_path):
    os.chmod(tmp_path, 0o777)
    with pytest.raises(UnsafeLayout, match="writable by other users"):
        NginxFiles(tmp_path).prepare()


def test_a_sticky_shared_state_dir_is_fine(tmp_path):
    os.chmod(tmp_path, 0o1777)
    NginxFiles(tmp_path).prepare()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the directory to another user")
def test_a_private_directory_owned_by_someone_else_is_refused(tmp_path):
    files = NginxFiles(tmp_path)
    files.private_dir.mkdir(mode=0o700)
    os.chown(files.private_dir, 65534, 65534)
    with pytest.raises(UnsafeLayout, match="not a directory owned by"):
        files.prepare()


def test_the_controller_refuses_to_start_with_an_unsafe_state_dir(tmp_path):
    from platformd.ingress import main

    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    args = main.build_parser().parse_args(["--state-dir", str(state), "--external-nginx"])
    with pytest.raises(main.StartError, match="writable by other users"):
        main.make_dataplane(args, __import__("prometheus_client").CollectorRegistry())
