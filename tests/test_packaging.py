"""The package installs as `platformd` without shadowing the standard library's `platform`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, cwd: Path) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_stdlib_platform_still_imports_from_the_repository_root():
    out = _run("import platform; print(platform.system(), platform.__file__)", ROOT)
    system, path = out.split(" ", 1)
    assert system == "Linux"
    assert not path.startswith(str(ROOT)), f"the checkout's platform/ shadowed the stdlib: {path}"


def test_stdlib_platform_and_platformd_from_elsewhere(tmp_path):
    out = _run("import platform, platformd.cli; print(platform.system(), platformd.cli.__name__)", tmp_path)
    assert out == "Linux platformd.cli"


def test_console_scripts_are_installed():
    bindir = Path(sys.executable).parent
    for script in ("platformd", "platformctl"):
        assert (bindir / script).exists(), f"{script} missing from {bindir}"
    help_text = subprocess.run([str(bindir / "platformd"), "--help"], capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0 and "--role" in help_text.stdout


def test_no_product_module_needs_pyroute2(tmp_path):
    """pyroute2 is a test dependency (network namespaces); the image does not ship it.

    Every module of the package is imported with ``pyroute2`` made unimportable.
    """
    code = """
import importlib, pkgutil, sys
sys.modules["pyroute2"] = None          # any import of it raises ImportError
import platformd
names = [m.name for m in pkgutil.walk_packages(platformd.__path__, "platformd.")]
for name in names:
    if not name.endswith("__main__"):
        importlib.import_module(name)
print(len(names))
"""
    assert int(_run(code, tmp_path)) > 50
