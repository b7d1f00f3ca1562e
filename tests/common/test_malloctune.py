"""malloctune: glibc takes the settings; elsewhere it does nothing and never raises."""

from __future__ import annotations

import ctypes
import subprocess
import sys

from platformd.common import malloctune


def test_glibc_takes_every_setting():
    # In a child: the settings are process-wide and tests share a process.
    code = "from platformd.common import malloctune; print(malloctune.tune())"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "True"


def test_a_refused_setting_is_reported_not_raised(monkeypatch):
    class Libc:
        @staticmethod
        def mallopt(param, value):
            return 0  # glibc's answer for a setting it refuses

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Libc())
    assert malloctune.tune() is False


def test_without_a_c_library_it_does_nothing(monkeypatch):
    def missing(name):
        raise OSError("no libc here")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert malloctune.tune() is False
