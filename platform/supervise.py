"""`platformd --role ingress|nodeproxy|all`: the container's main process.

Renders a supervisord configuration for the role from
``templates/supervisord.conf.j2`` and runs supervisord *in this process* (the
``supervisor`` package's own ``main``), so supervisord is PID 1's code and no
shell or wrapper sits between Kubernetes and it.

Programs per role (priority: start order; stop order is the reverse):

    nginx (10)       nginx master with ``daemon off``, under logpipe   ingress, all
    ingress (20)     ``platformd ingress``                             ingress, all
    nodeproxy (20)   ``platformd nodeproxy``                           nodeproxy, all
    health (30)      the combined health server                        always

Component flags given to ``platformd --role`` go to every program whose
parser knows them (``--kubeconfig`` reaches both controllers); a flag no
program of the role knows is an error, not silently dropped.

A program that goes FATAL (it kept crashing through its start retries) makes
the ``fatal-watch`` event listener record it and stop supervisord; this
process then exits 1 so Kubernetes restarts the pod.

Stopping (SIGTERM): health and controllers get up to 5 s each, nginx drains
with QUIT for up to 20 s; programs of one priority stop together, so the whole
stop is bounded by ``STOP_BOUND_SECONDS`` (5 + 5 + 20 = 30 s, the pod's
default grace period; the chart sets 40 s to leave slack).
"""

from __future__ import annotations

import argparse
import importlib
import os
import secrets
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

from platformd import localrun, paths
from platformd.cli import CONFIG_ERROR_ENV

ROLES = ("ingress", "nodeproxy", "all")
STOP_BOUND_SECONDS = 30
DEFAULT_HEALTH_PORT = 10254
DEFAULT_INGRESS_INTERNAL_PORT = 10281
DEFAULT_NODEPROXY_HEALTHZ = "0.0.0.0:10256"
DEFAULT_NODEPROXY_METRICS = "127.0.0.1:10249"

#: The user name of supervisord's control socket (the password is per start).
SUPERVISOR_USER = "platformd"
#: In the state dir: programs that exited with EXIT_CONFIG (see fatalwatch).
CONFIG_ERROR_FILE = "config-error"

COMPONENT_PARSERS = {
    "ingress": "platformd.ingress.main",
    "nodeproxy": "platformd.nodeproxy.main",
}


class SuperviseError(Exception):
    """A bad command line or environment: reported in one line, exit 2."""


@dataclass(frozen=True)
class Program:
    name: str
    argv: tuple[str, ...]
    priority: int
    stopsignal: str = "TERM"
    stopwaitsecs: int = 5
    startsecs: int = 1
    startretries: int = 5
    env: tuple[tuple[str, str], ...] = ()

    @property
    def command(self) -> str:
        return supervisor_quote(self.argv)

    @property
    def environment(self) -> str:
        # supervisord's environment= syntax: KEY="value",KEY2="value2"
        return ",".join(f'{k}="{_escape_percent(v)}"' for k, v in self.env)


def _escape_percent(value: str) -> str:
    return value.replace("%", "%%")


def supervisor_quote(argv: tuple[str, ...] | list[str]) -> str:
    """Quote argv for a supervisord ``command=`` line.

    supervisord splits the line with shlex and expands ``%(name)s``, so each
    argument is shell-quoted and every ``%`` doubled. Newlines and NULs would
    end the ini line and let a value inject a new section: they are refused.
    """
    for arg in argv:
        if "\n" in arg or "\r" in arg or "\x00" in arg:
            raise SuperviseError(f"argument {arg!r} contains a line break or NUL")
    return " ".join(_escape_percent(shlex.quote(a)) for a in argv)


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/run/platform")
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(base) / f"platform-{os.getuid()}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="platformd",
        description="Run the role's programs under supervisord. Other flags go to the programs that take them.",
        add_help=False,  # --help also lists the role's programs' flags: see role_help
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help (with --role: the programs' flags too)")
    parser.add_argument("--role", choices=ROLES, default=os.environ.get("PLATFORM_ROLE"),
                        help="which programs run (default $PLATFORM_ROLE)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="runtime files (supervisor socket, nginx prefix); default /run/platform as root, "
                        "else $XDG_RUNTIME_DIR/platform-<uid> (or /tmp/platform-<uid>)")
    parser.add_argument("--health-port", "--healthz-port", dest="health_port", type=int,
                        default=DEFAULT_HEALTH_PORT, help="combined health server port (default 10254)")
    parser.add_argument("--health-address", default="0.0.0.0", help="combined health server address (default 0.0.0.0)")
    parser.add_argument("--ingress-internal-port", type=int, default=DEFAULT_INGRESS_INTERNAL_PORT,
                        help="127.0.0.1 port of the ingress controller's own health/metrics server")
    parser.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("PLATFORM_LOG_FORMAT", "text"),
                        help="log lines of every program (default $PLATFORM_LOG_FORMAT, else text)")
    parser.add_argument("--supervisor-loglevel", default="info", help="supervisord's own log level (default info)")
    parser.add_argument("--print-config", action="store_true", help="print the supervisord configuration and exit")
    return parser


#: Flags of a program that ``plan_programs`` sets itself: listed, not offered.
SET_BY_SUPERVISE = {"ingress": ("--state-dir", "--healthz-host", "--healthz-port", "--external-nginx"),
                    "nodeproxy": ()}


def role_help(parser: argparse.ArgumentParser, role: str | None) -> str:
    """``platformd [--role R] --help``: the supervisor's flags, then each program's."""
    out = [parser.format_help()]
    if not role:
        out.append("Give --role with --help to see the flags of that role's programs.\n")
        return "\n".join(out)
    for component in (["ingress", "nodeproxy"] if role == "all" else [role]):
        sub = _load_component_parser(component)
        actions = [a for a in sub._actions
                   if a.option_strings and not set(a.option_strings) & {"-h", "--help"}
                   and not set(a.option_strings) & set(SET_BY_SUPERVISE[component])]
        formatter = sub._get_formatter()
        formatter.start_section(f"flags passed to the {component} program (platformd {component})")
        formatter.add_arguments(actions)
        formatter.end_section()
        text = formatter.format_help()
        if SET_BY_SUPERVISE[component]:
            text += f"  (set by platformd for this program: {', '.join(SET_BY_SUPERVISE[component])})\n"
        out.append(text)
    return "\n".join(out)


def _load_component_parser(component: str) -> argparse.ArgumentParser:
    try:
        module = importlib.import_module(COMPONENT_PARSERS[component])
    except ImportError as exc:  # pragma: no cover - packaging error
        raise SuperviseError(f"component {component} is not available: {exc}") from exc
    return module.build_parser()


def route_flags(tokens: list[str], parsers: dict[str, argparse.ArgumentParser]) -> dict[str, list[str]]:
    """Split component flags among the components whose parsers know them.

    Pure: looks only at the parsers' option tables. Returns argv per component.
    """
    routed: dict[str, list[str]] = {name: [] for name in parsers}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            raise SuperviseError(f"unexpected argument {token!r}: component flags start with --")
        flag, has_inline_value, _ = token.partition("=")
        owners = [name for name, p in parsers.items() if flag in p._option_string_actions]
        if not owners:
            raise SuperviseError(f"unknown flag {flag} for role with programs {', '.join(sorted(parsers))}")
        action = parsers[owners[0]]._option_string_actions[flag]
        takes_value = action.nargs != 0
        group = [token]
        if takes_value and not has_inline_value:
            if i + 1 >= len(tokens):
                raise SuperviseError(f"flag {flag} needs a value")
            group.append(tokens[i + 1])
            i += 1
        for name in owners:
            routed[name].extend(group)
        i += 1
    return routed


def _has_flag(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def plan_programs(args: argparse.Namespace, routed: dict[str, list[str]], state_dir: Path) -> list[Program]:
    """The programs for the role with their full command lines (pure)."""
    py = sys.executable
    env = (("PLATFORM_LOG_FORMAT", args.log_format), ("PYTHONUNBUFFERED", "1"),
           (CONFIG_ERROR_ENV, str(state_dir / CONFIG_ERROR_FILE)))
    programs: list[Program] = []
    health = [py, "-m", "platformd.cli", "health", "--role", args.role,
              "--address", args.health_address, "--port", str(args.health_port),
              "--supervisor-socket", str(state_dir / "supervisor.sock")]
    if "ingress" in routed:
        ingress_argv = list(routed["ingress"])
        common = ["--state-dir", str(state_dir / "ingress")]
        programs.append(Program(
            name="nginx",
            argv=(py, "-m", "platformd.cli", "nginx", *common, *ingress_argv),
            priority=10, stopsignal="QUIT", stopwaitsecs=20, env=env,
        ))
        internal = ["--healthz-host", "127.0.0.1", "--healthz-port", str(args.ingress_internal_port),
                    "--external-nginx"]
        programs.append(Program(
            name="ingress",
            argv=(py, "-m", "platformd.cli", "ingress", *common, *internal, *ingress_argv),
            priority=20, env=env,
        ))
        health += ["--ingress-url", f"http://127.0.0.1:{args.ingress_internal_port}"]
    if "nodeproxy" in routed:
        np_argv = list(routed["nodeproxy"])
        extra: list[str] = []
        healthz = DEFAULT_NODEPROXY_HEALTHZ
        metrics = DEFAULT_NODEPROXY_METRICS
        if not _has_flag(np_argv, "--healthz-bind-address"):
            extra += ["--healthz-bind-address", healthz]
        else:
            healthz = _flag_value(np_argv, "--healthz-bind-address")
        if not _has_flag(np_argv, "--metrics-bind-address"):
            extra += ["--metrics-bind-address", metrics]
        else:
            metrics = _flag_value(np_argv, "--metrics-bind-address")
        programs.append(Program(
            name="nodeproxy",
            argv=(py, "-m", "platformd.cli", "nodeproxy", *extra, *np_argv),
            priority=20, env=env,
        ))
        health += ["--nodeproxy-healthz-url", f"http://{_local(healthz)}",
                   "--nodeproxy-metrics-url", f"http://{_local(metrics)}"]
    programs.append(Program(name="health", argv=tuple(health), priority=30, env=env))
    return programs


def _flag_value(argv: list[str], flag: str) -> str:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    raise SuperviseError(f"flag {flag} needs a value")


def _local(bind: str) -> str:
    """host:port to reach a bind address from this host (0.0.0.0 → 127.0.0.1)."""
    host, _, port = bind.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port}"


def render_config(args: argparse.Namespace, programs: list[Program], state_dir: Path,
                  password: str | None = None) -> str:
    """The supervisord configuration. The control socket is private (0700) and
    also asks for a password made fresh for each start (``password``, random
    by default), which the health server reads from this file's
    ``[supervisorctl]`` section as supervisorctl does; without one supervisord
    logs a CRIT "running without any HTTP authentication checking" at every
    start. The file is therefore written 0600."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.templates_dir())),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
    )
    for value in (str(state_dir),):
        supervisor_quote([value])  # refuses line breaks in paths too
    fatal_listener = supervisor_quote([sys.executable, "-m", "platformd.fatalwatch",
                                       "--marker", str(state_dir / "fatal"),
                                       "--starts", str(state_dir / "starts.json"),
                                       "--config-error", str(state_dir / CONFIG_ERROR_FILE)])
    return env.get_template("supervisord.conf.j2").render(
        role=args.role, state_dir=_escape_percent(str(state_dir)),
        socket=_escape_percent(str(state_dir / "supervisor.sock")),
        loglevel=args.supervisor_loglevel, programs=programs, fatal_listener=fatal_listener,
        as_root=os.geteuid() == 0, username=SUPERVISOR_USER, password=password or secrets.token_hex(16),
    )


def prepare_state_dir(state_dir: Path) -> None:
    """Fresh runtime files for this start; a stale fatal marker or nginx.conf
    from an earlier run must not leak into this one."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
    (state_dir / "fatal").unlink(missing_ok=True)
    (state_dir / "starts.json").unlink(missing_ok=True)
    (state_dir / CONFIG_ERROR_FILE).unlink(missing_ok=True)
    stale = state_dir / "ingress" / "nginx.conf"
    stale.unlink(missing_ok=True)
    sock = state_dir / "supervisor.sock"
    if len(str(sock).encode()) >= 100:
        raise SuperviseError(f"--state-dir {state_dir} is too long for a unix socket path")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        if args.help:
            sys.stdout.write(role_help(parser, args.role))
            return 0
        if not args.role:
            raise SuperviseError("--role (or PLATFORM_ROLE) is required: one of " + ", ".join(ROLES))
        components = ["ingress", "nodeproxy"] if args.role == "all" else [args.role]
        parsers = {c: _load_component_parser(c) for c in components}
        routed = route_flags([t for t in rest if t != "--role"], parsers)
        state_dir = (args.state_dir or default_state_dir()).resolve()
        programs = plan_programs(args, routed, state_dir)
        config = render_config(args, programs, state_dir)
        if args.print_config:
            sys.stdout.write(config)
            return 0
        prepare_state_dir(state_dir)
        if "ingress" in routed and not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
            raise SuperviseError("nginx is not installed (Debian: apt-get install nginx libnginx-mod-http-lua)")
    except SuperviseError as exc:
        print(f"platformd: {exc}", file=sys.stderr)
        return 2
    conf_path = state_dir / "supervisord.conf"
    conf_path.unlink(missing_ok=True)
    with open(os.open(conf_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(config)  # it holds the control socket's password
    from supervisor import supervisord  # imported late: only this path needs it

    from platformd import supervisorlog

    supervisorlog.install(args.log_format)
    pointer = localrun.Pointer(pid=os.getpid(), role=args.role, state_dir=str(state_dir),
                               health_url=f"http://{_local(f'{args.health_address}:{args.health_port}')}")
    localrun.write(pointer)  # platformctl finds this run with no flags
    try:
        supervisord.main(["-c", str(conf_path)])
    finally:
        localrun.remove(pointer.pid)
    fatal = state_dir / "fatal"
    if fatal.exists():
        program, _, why = fatal.read_text().strip().partition("\n")
        print(f"platformd: program {program} {why or 'went FATAL'}; exiting 1", file=sys.stderr)
        return 1
    return 0
