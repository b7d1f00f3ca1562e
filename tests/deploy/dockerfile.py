"""deploy/image.py (the image builder) for the tests.

Its Dockerfile reader and its build-context rules (.dockerignore) are the
ones the tests check deploy/Dockerfile with, so a test and the build cannot
disagree about what the Dockerfile says.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "deploy" / "image.py"
_spec = importlib.util.spec_from_file_location("platform_deploy_image", _PATH)
image = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = image            # dataclasses look their module up
_spec.loader.exec_module(image)

parse = image.parse
apt_packages = image.apt_packages
dockerignore_excludes = image.dockerignore_excludes
build_context = image.build_context
