"""`platformd` command line (placeholder until the component issues land)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("platformd: no command yet", file=sys.stderr)
    return 2
