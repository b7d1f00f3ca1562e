"""`platformd`: one entry point for every component of the image.

    platformd --role ingress|nodeproxy|all [component flags]   supervisord with the role's programs
    platformd ingress [flags]                                   the ingress controller loop
    platformd nodeproxy [flags]                                 the node proxy loop (IPVS or nftables mode)
    platformd health [flags]                                    the combined health server
    platformd --role ingress|nodeproxy|all --help               every flag of the role's programs

Each subcommand lives in its own module and is imported only when chosen, so
the node proxy never loads the ingress code and the other way round.
"""

from __future__ import annotations

import importlib
import os
import sys

from platformd.common.errors import EXIT_CONFIG

SUBCOMMANDS = {
    "ingress": "platformd.ingress.main",
    "nodeproxy": "platformd.nodeproxy.main",
    "health": "platformd.health",
    "nginx": "platformd.ingress.launch",
    "supervise": "platformd.supervise",
}

USAGE = __doc__ or ""
#: where a supervised program records that it exited with EXIT_CONFIG
CONFIG_ERROR_ENV = "PLATFORM_CONFIG_ERROR_FILE"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE.strip())
        return 0
    if args and args[0] in SUBCOMMANDS:
        if _config_error_recorded(args[0]):
            return EXIT_CONFIG  # restarted by supervisord before fatal-watch stopped it: say it once
        module = importlib.import_module(SUBCOMMANDS[args[0]])
        status = int(module.main(args[1:]) or 0)
        if status == EXIT_CONFIG:
            _record_config_error(args[0])
        return status
    if any(a == "--role" or a.startswith("--role=") for a in args) or os.environ.get("PLATFORM_ROLE"):
        module = importlib.import_module(SUBCOMMANDS["supervise"])
        return int(module.main(args) or 0)
    print(USAGE.strip(), file=sys.stderr)
    unknown = args[0] if args else None
    if unknown is None:
        print("platformd: nothing to do: give --role or a subcommand", file=sys.stderr)
    elif unknown.startswith("-"):
        print(f"platformd: unrecognised argument {unknown} (without --role only subcommands and --help "
              "are accepted)", file=sys.stderr)
    else:
        print(f"platformd: unknown subcommand {unknown!r} (one of {', '.join(sorted(SUBCOMMANDS))})",
              file=sys.stderr)
    return 2


def _config_error_recorded(program: str) -> bool:
    path = os.environ.get(CONFIG_ERROR_ENV)
    try:
        return bool(path) and program in open(path).read().split()
    except OSError:
        return False


def _record_config_error(program: str) -> None:
    """Tell platformd's fatal-watch that ``program`` stopped on a configuration
    error (``EXIT_CONFIG``), so it stops the role now instead of letting
    supervisord restart the program through its retries (see fatalwatch)."""
    path = os.environ.get(CONFIG_ERROR_ENV)
    if path:
        try:
            with open(path, "a") as f:
                f.write(program + "\n")
        except OSError:
            pass  # then supervisord's retries end it, as without a supervisor


if __name__ == "__main__":
    sys.exit(main())
