"""Model → view model of nginx.conf: global settings only, already escaped.

nginx.conf holds no server, location or zone per Ingress: routes are data
for the Lua router (``routes.py``, lua/router.lua), so this view is built
from ``GlobalSettings``, the runtime paths and the set of generated lanes
in use (``lanes.py``: one per distinct directive-only setting, not per
route), and the file has the same size at 10 and at 10,000 Ingresses. Every string in a view object is a
constant chosen here or a value that went through its validator and
``validate.quote``; tokens already quoted carry a ``_q`` suffix.

The template renders the router's fixed lanes (``location /`` with the
global defaults, ``@platform_proxy_on``/``_off`` for HTTP(S) upstreams by
response buffering, ``@platform_grpc``/``grpcs``): which route goes where is
decided in ``routes.py`` and lua/router.lua.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from platformd.ingress import auth as auth_mod
from platformd.ingress import lanes as lanes_mod
from platformd.ingress import validate as v
from platformd.ingress.layout import NginxFiles
from platformd.ingress.model import Configuration, GlobalSettings, Hsts


def rendered_settings(settings: GlobalSettings) -> GlobalSettings:
    """``settings`` without the fields only the route table carries (the
    default body size, HSTS and the ssl-redirect code): two settings equal
    here render the same nginx.conf, so a change elsewhere needs no reload."""
    return replace(settings, body_size="0", tls=replace(settings.tls, hsts=Hsts(), redirect_code=308))

__all__ = ["NginxView", "RuntimePaths", "build", "rendered_settings"]


@dataclass(frozen=True)
class RuntimePaths:
    """Where this nginx keeps its files. Chosen by us, never by users."""

    state_dir: Path
    lua_dir: Path
    default_cert: Path
    default_key: Path

    @property
    def files(self) -> NginxFiles:
        return NginxFiles(self.state_dir)

    @property
    def socket(self) -> Path:
        return self.files.socket

    @property
    def pid_file(self) -> Path:
        return self.files.pid_file

    @property
    def error_log(self) -> Path:
        return self.files.error_log

    @property
    def access_log(self) -> Path:
        return self.files.access_log

    @property
    def temp_dir(self) -> Path:
        return self.files.temp_dir

    @property
    def lua_state(self) -> Path:
        """The sections the controller last had confirmed, for a new master (configuration.restore)."""
        return self.state_dir / "lua-state"


# The internal server answering 503 for requests whose backend is unknown or
# has no endpoints listens here, on the http port: the balancer sends such
# requests to it (balancer_by_lua cannot answer with a status of its own).
# A loopback address rather than a unix socket: workers may run as a user the
# state directory is closed to, and a crashed nginx leaves no file behind.
# nginx already listens on *:<http port>, so this costs no extra socket and
# no extra port; anyone connecting to it gets a 503 and nothing else.
UNAVAILABLE_ADDRESS = "127.0.0.2"

_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+@=,-]*$")
# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def _plain_path(field: str, path: Path) -> str:
    text = str(path)
    if not _SAFE_PATH.fullmatch(text):
        raise v.ValidationError(field, text, "runtime paths must be absolute and plain (letters, digits, . _ / + @ = , -)")
    return text


def _file_path(field: str, path: Path) -> str:
    return v.quote(_plain_path(field, path))


@dataclass(frozen=True)
class NginxView:
    worker_processes: str
    worker_connections: int
    worker_shutdown_timeout: int
    worker_user: str | None
    pid_q: str
    error_log_q: str
    error_level: str
    lua_package_path_q: str
    temp_dir_q: dict[str, str]
    access_log_q: str | None
    log_format_q: str
    server_tokens: str
    keepalive_timeout: int
    keepalive_requests: int
    upstream_keepalive: int
    forwarded_headers: bool
    ssl_protocols: str
    ssl_ciphers_q: str
    default_cert_q: str
    default_key_q: str
    http_port: int
    https_port: int
    reuse_port: bool
    socket_q: str
    lua_state_q: str  # directory of the last confirmed sections, a Lua string literal
    unavailable_address: str  # the 503 server's own loopback address
    # The defaults of `location /` (the router's fast path) and the lanes.
    connect_timeout: int
    send_timeout: int
    read_timeout: int
    buffering: str  # "on" / "off"
    proxy_lanes: tuple[str, ...] = ("on", "off")  # @platform_proxy_<buffering>
    # Generated lanes (lanes.py): one per distinct directive set routes use.
    lanes: tuple["LaneView", ...] = ()
    lane_files: tuple[tuple[Path, str], ...] = ()  # (path, content) the lanes name
    auth_resolvers: str = field(default_factory=auth_mod.resolvers)  # for auth-url hosts (auth.resolvers)
    gateway_ports: tuple[int, ...] = ()  # mapped Gateway listener ports (plain HTTP)
    gateway_tls_ports: tuple[int, ...] = ()  # the same with TLS
    # (local, listener) port of each; when any, X-Forwarded-Port shows the listener's
    gateway_port_map: tuple[tuple[int, int], ...] = ()
    server_port_var: str = "$server_port"


@dataclass(frozen=True)
class LaneView:
    """One generated lane: its named location, the fixed lane it extends
    ("proxy" with buffering "on"/"off", or "grpc"/"grpcs"), and its directive
    lines (validated; file directives name their file)."""

    name: str
    kind: str
    buffering: str
    lines: tuple[str, ...]


def _lane_views(specs: tuple[lanes_mod.LaneSpec, ...], directory: Path) -> tuple[LaneView, ...]:
    out = []
    for spec in specs:
        lines = []
        for name, value in spec.directives:
            if name in lanes_mod.FILE_DIRECTIVES:
                value = _file_path(name, lanes_mod.file_path(directory, value))
            lines.append(f"{name} {value};")
        if spec.base.startswith("@platform_proxy_"):
            kind, buffering = "proxy", spec.base.removeprefix("@platform_proxy_")
        else:
            kind, buffering = spec.base.removeprefix("@platform_"), ""
        out.append(LaneView(spec.name, kind, buffering, tuple(lines)))
    return tuple(out)


def build(config: Configuration, paths: RuntimePaths) -> NginxView:
    """The view model for ``config``; raises ValidationError on a bad value."""
    settings = config.settings
    socket = str(paths.socket)
    if len(socket.encode()) > MAX_SOCKET_PATH:
        raise v.ValidationError("state_dir", socket, f"unix socket path longer than {MAX_SOCKET_PATH} bytes")
    lua_dir = _plain_path("lua_dir", paths.lua_dir)
    temp = {name: _file_path("temp_dir", paths.temp_dir / name) for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    specs = lanes_mod.used(config)
    return NginxView(
        worker_processes=str(settings.workers.processes or "auto"),
        worker_connections=settings.workers.connections,
        worker_shutdown_timeout=settings.workers.shutdown_timeout,
        worker_user=v.user_name("workers.user", settings.workers.user) if settings.workers.user else None,
        pid_q=_file_path("pid", paths.pid_file),
        error_log_q=_file_path("error_log", paths.error_log),
        error_level=settings.logging.error_level,
        # Our modules first; ";;" appends the default path (resty.core, cjson).
        lua_package_path_q=v.quote(f"{lua_dir}/?.lua;{lua_dir}/?/init.lua;;"),
        temp_dir_q=temp,
        # To the standard output that supervisord (or the controller) forwards,
        # as containers expect: a file in the state directory grew without
        # bound (235 MB after 1.2 M requests).
        access_log_q=v.quote("/dev/stdout") if settings.logging.access_log else None,
        log_format_q=v.quote(v.log_format("logging.format", settings.logging.format), allow_variables=True),
        server_tokens="on" if settings.server_tokens else "off",
        keepalive_timeout=settings.keepalive_timeout,
        keepalive_requests=settings.keepalive_requests,
        upstream_keepalive=settings.upstream_keepalive_connections,
        forwarded_headers=settings.use_forwarded_headers,
        ssl_protocols=" ".join(v.ssl_protocol("tls.protocols", p) for p in settings.tls.protocols),
        ssl_ciphers_q=v.quote(v.ssl_ciphers("tls.ciphers", settings.tls.ciphers)),
        default_cert_q=_file_path("default_cert", paths.default_cert),
        default_key_q=_file_path("default_key", paths.default_key),
        http_port=settings.listen.http_port,
        https_port=settings.listen.https_port,
        reuse_port=settings.listen.reuse_port,
        gateway_ports=tuple(sorted(local for local, _ in settings.listen.gateway_ports)),
        gateway_tls_ports=tuple(sorted(local for local, _ in settings.listen.gateway_tls_ports)),
        gateway_port_map=tuple(sorted(settings.listen.gateway_ports + settings.listen.gateway_tls_ports)),
        server_port_var=("$platform_listener_port" if settings.listen.gateway_ports + settings.listen.gateway_tls_ports
                         else "$server_port"),
        socket_q=v.quote("unix:" + _plain_path("socket", paths.socket)),
        # A plain path (letters, digits, . _ / + @ = , -) in double quotes is
        # also a valid Lua string literal.
        lua_state_q='"' + _plain_path("lua_state", paths.lua_state) + '"',
        unavailable_address=UNAVAILABLE_ADDRESS,
        connect_timeout=settings.timeouts.connect,
        send_timeout=settings.timeouts.send,
        read_timeout=settings.timeouts.read,
        buffering="on" if settings.buffering else "off",
        lanes=_lane_views(specs, paths.files.lane_files),
        lane_files=tuple(sorted(lanes_mod.files(specs, paths.files.lane_files).items())),
    )
