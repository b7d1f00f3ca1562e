"""Where the non-Python parts of the product (Lua, templates) live.

Order: ``PLATFORM_SHARE_DIR`` (set in the image), the source checkout this
module was imported from (editable installs, tests), then the data files a
wheel installs under ``<prefix>/share/platformd``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def share_dir() -> Path:
    override = os.environ.get("PLATFORM_SHARE_DIR")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "lua").is_dir() and (checkout / "templates").is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "platformd"


def lua_dir() -> Path:
    return share_dir() / "lua"


def templates_dir() -> Path:
    return share_dir() / "templates"
