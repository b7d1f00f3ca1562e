"""The Lua router's lookup on its own: microseconds per host + path lookup.

Run from the repository root: ``.venv/bin/python bench/bench_router.py``.
Builds two route tables with ``routes.RouteTable`` (10,000 hosts x 2 paths;
one host with 1,000 Prefix paths), compiles each with lua/router.lua inside
a throwaway nginx (LuaJIT, as in production; one process, no listener but a
unix socket) and times ``router.find`` + ``router.match`` over a rotating
set of request URIs, after a warm-up that lets LuaJIT compile the loop.
Every host is looked up once before timing (the router compiles hosts on
first use), so the figure is the steady state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from platformd import paths  # noqa: E402
from platformd.ingress.model import Configuration, Location, Server  # noqa: E402
from platformd.ingress.routes import payload  # noqa: E402

LOOKUPS = 1_000_000

BENCH_LUA = r"""
local cjson = require("cjson.safe")
local router = require("router")
local function run(file)
  local f = assert(io.open(file, "rb"))
  local data = cjson.decode(f:read("*a"))
  f:close()
  local compiled = router.compile(data.table)
  local hosts, uris = data.hosts, data.uris
  local nh, nu = #hosts, #uris
  for i = 1, nh do router.find(compiled, hosts[i]) end -- compile every host once
  local found = 0
  local function loop(n)
    for i = 1, n do
      local host = router.find(compiled, hosts[(i % nh) + 1])
      if router.match(host, uris[(i % nu) + 1]) then found = found + 1 end
    end
  end
  loop(200000)
  ngx.update_time()
  local start = ngx.now()
  loop(LOOKUPS)
  ngx.update_time()
  return (ngx.now() - start) / LOOKUPS * 1e6, found
end
local out = {}
for _, name in ipairs({ "many_hosts", "many_paths" }) do
  local us = run(ngx.var.bench_dir .. "/" .. name .. ".json")
  out[#out + 1] = name .. "=" .. string.format("%.3f", us)
end
ngx.say(table.concat(out, " "))
""".replace("LOOKUPS", str(LOOKUPS))


def tables() -> dict[str, dict]:
    many_hosts = Configuration(servers=tuple(
        Server(f"h{i}.bench.example", locations=(Location("/", backend="web"), Location(f"/api{i}", backend="api")))
        for i in range(10_000)))
    many_paths = Configuration(servers=(Server("one.bench.example", locations=tuple(
        Location(f"/p{i}", backend="web") for i in range(1_000))),))
    return {
        "many_hosts": {"table": payload(many_hosts),
                       "hosts": [f"h{i}.bench.example" for i in range(0, 10_000, 7)],
                       "uris": ["/", "/api7", "/api7/items/1", "/static/app.js"]},
        "many_paths": {"table": payload(many_paths), "hosts": ["one.bench.example"],
                       "uris": [f"/p{i}/x/y" for i in range(0, 1_000, 13)] + ["/nomatch/a/b"]},
    }


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="pdrouter-"))
    try:
        for name, data in tables().items():
            (work / f"{name}.json").write_text(json.dumps(data))
        (work / "logs").mkdir()
        (work / "bench.lua").write_text(BENCH_LUA)
        lua_dir = paths.lua_dir()
        sock = work / "b.sock"
        (work / "nginx.conf").write_text(f"""
daemon off; master_process off; error_log {work}/logs/error.log;
pid {work}/nginx.pid;
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
events {{ worker_connections 16; }}
http {{
  access_log off;
  lua_package_path "{lua_dir}/?.lua;{lua_dir}/?/init.lua;;";
  client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work};
  server {{
    listen unix:{sock};
    location / {{ set $bench_dir "{work}"; content_by_lua_file {work}/bench.lua; }}
  }}
}}
""")
        proc = subprocess.Popen(["/usr/sbin/nginx", "-p", str(work), "-c", str(work / "nginx.conf")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not sock.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError((work / "logs/error.log").read_text())
                time.sleep(0.05)
            out = subprocess.run(["curl", "-s", "--max-time", "300", "--unix-socket", str(sock), "http://x/"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        finally:
            proc.terminate()
            proc.wait(10)
        figures = dict(item.split("=") for item in out.split())
        print(f"router lookup (find + match, LuaJIT in nginx, {LOOKUPS:,} lookups after a warm-up):")
        print(f"  10,000 hosts x 2 paths: {float(figures['many_hosts']):.3f} us per lookup")
        print(f"  1 host x 1,000 paths:   {float(figures['many_paths']):.3f} us per lookup")
    finally:
        if not os.environ.get("BENCH_DEBUG"):
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
