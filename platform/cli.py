"""`platformd`: one entry point for every component of the image.

    platformd --role ingress|nodeproxy|all [component flags]   supervisord with the role's programs
    platformd ingress [flags]                                   the ingress controller loop
    platformd nodeproxy [flags]                                 the IPVS node proxy loop
    platformd health [flags]                                    the combined health server

Each subcommand lives in its own module and is imported only when chosen, so
the node proxy never loads the ingress code and the other way round.
"""

from __future__ import annotations

import importlib
import os
import sys

SUBCOMMANDS = {
    "ingress": "platformd.ingress.main",
    "nodeproxy": "platformd.nodeproxy.main",
    "health": "platformd.health",
    "nginx": "platformd.ingress.launch",
    "supervise": "platformd.supervise",
}

USAGE = __doc__ or ""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE.strip())
        return 0
    if args and args[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[args[0]])
        return int(module.main(args[1:]) or 0)
    if any(a == "--role" or a.startswith("--role=") for a in args) or os.environ.get("PLATFORM_ROLE"):
        module = importlib.import_module(SUBCOMMANDS["supervise"])
        return int(module.main(args) or 0)
    print(USAGE.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
