--- The router: the only matcher of hosts and paths, fed with data.
--
-- nginx.conf has no server or location per Ingress. Every request of the
-- public listeners reaches `location /` of the one catch-all server, whose
-- rewrite_by_lua calls `route()`. The controller computes the route table
-- and its order (platformd.ingress.routes, section "routes") and the
-- router only looks up:
--   host: the exact name (a hash), then "*.<rest>" for exactly one label,
--         then the catch-all entry ("default": host-less rules and the
--         default backend);
--   path: Exact (a hash), then the longest Prefix (a hash per "/"-bounded
--         prefix of the URI, longest first: as many lookups as the URI has
--         segments, whatever the host's number of paths), on hosts with
--         Regex paths the regexes longer than that prefix, in the order the
--         controller sent (longest first, as ingress-nginx orders use-regex
--         hosts), then Prefix "/"; nothing: 404.
-- Case: paths are compared as sent (case-sensitive), regex paths
-- case-insensitively; $host is lower-case already. $uri is nginx's
-- normalised URI (decoded, dot segments and double slashes resolved).
--
-- Per-route settings come with the route as a *policy* (shared by every
-- route with equal settings) and are applied here, per request, in nginx's
-- order nginx's phases had them: body size (413), ssl-redirect, redirect, CORS preflight,
-- HSTS and CORS response headers (through variables the lanes' add_header
-- print), rewrite-target, limit-rps / limit-connections (503), allow/deny
-- (403), then the proxy.
--
-- Lanes. A route whose settings equal the defaults `location /` was
-- rendered with (HTTP, the global buffering and timeouts, no Host header of
-- its own, no connection limit) and whose backend is served by the balancer
-- alone (`entry.plain`) is proxied from `location /` itself: the fast
-- path, one coroutine and a few lookups. Any other route is sent with
-- ngx.exec to the named location its policy names (templates/nginx.conf.j2:
-- buffered or unbuffered HTTP(S), gRPC, gRPCS), where `route(lane)` runs
-- again (ngx.ctx does not survive ngx.exec) and applies everything; those
-- lanes proxy through `upstream_lane`, whose balancer sets the route's
-- timeouts, and have a log phase (EWMA, connection counts).
--
-- Per worker, the compiled table follows the section's version, rebuilt on
-- the first request after a change or by the warm-up timer (platform.lua).
local cidr = require("util.cidr")
local conditions = require("conditions")
local weighted = require("weighted")
local bound = require("bound")
local wildcards = require("wildcards")
local deadline = require("deadline")
local request_redirect = require("redirect")
local changes_now = require("util.changes").current
local reader = require("util.variable").reader
local headers = require("headers")
local mirror = require("mirror")

-- The variables every request reads, their names hashed once (util/variable:
-- ngx.var[name] lower-cases and hashes the name per read, ~150 instructions).
local var_host = reader("host")
local var_uri = reader("uri")
local var_request = reader("platform_request")
local var_access_scheme = reader("pass_access_scheme")

-- nil outside nginx (the specs load the pure part of this module).
local ngx = ngx
local ngx_var = ngx and ngx.var
local re_match = ngx and ngx.re.match
local limit -- util.limit, loaded by M.init (it needs the shared dict)
local client_tls -- loaded by M.init
local traffic = require("traffic")
local byte = string.byte
local sub = string.sub

local M = {}

-- JSON null as the decoder gives it (the stored section is not normalised).
local null = ngx and require("cjson.safe").null

local value = require("util.nullable").value

-- How regex routes are tried: PCRE through ngx.re.find ("ijo": case-
-- insensitive as ingress-nginx's `~*` locations, JIT, compiled once).
M.regex_find = ngx and ngx.re.find

local SLASH = 47

---------------------------------------------------------------------------
-- Compiling the section (pure, tested in tests/lua/router_spec.lua)
---------------------------------------------------------------------------

-- "$1x$2" -> {"", 1, "x", 2}: literal parts and capture numbers, so a
-- rewrite builds its URI without a pattern substitution per request.
local function target_parts(target)
  local parts = {}
  local pos = 1
  while true do
    local from, to, digit = target:find("%$(%d)", pos)
    if from == nil then
      parts[#parts + 1] = target:sub(pos)
      return parts
    end
    parts[#parts + 1] = target:sub(pos, from - 1)
    parts[#parts + 1] = tonumber(digit)
    pos = to + 1
  end
end

local function compile_policy(p)
  local redirect, cors, rewrite_target = value(p.redirect), value(p.cors), value(p.rewrite_target)
  if cors ~= nil then
    cors = { origin_regex = value(cors.origin_regex), methods = cors.methods, headers = cors.headers,
             expose = value(cors.expose), credentials = cors.credentials, max_age = cors.max_age }
  end
  local policy = {
    fast = p.fast,
    lane = p.lane,
    scheme = p.scheme,
    auto_scheme = p.scheme == "auto", -- AUTO_HTTP: the request's scheme
    body_size = p.body_size,
    timeouts = p.timeouts,
    upstream_vhost = p.upstream_vhost ~= "" and p.upstream_vhost or nil,
    ssl_redirect = p.ssl_redirect,
    redirect = redirect,
    cors = cors,
    rps = p.limit_rps,
    burst = p.limit_burst,
    connections = p.limit_connections,
    proxy = redirect == nil,
    rpm = p.limit_rpm or 0,
    rpm_burst = p.limit_rpm_burst or 0,
    req_status = p.limit_status and p.limit_status[1] or 503,
    conn_status = p.limit_status and p.limit_status[2] or 503,
    traffic = traffic.compile(value(p.traffic)),
  }
  local gateway_redirect = value(p.request_redirect)
  if gateway_redirect ~= nil then
    policy.request_redirect = request_redirect.compile(gateway_redirect)
    policy.proxy = false
  end
  -- Served by `fast()` alone: nothing to apply but the proxy itself.
  policy.simple = p.fast and policy.proxy and cors == nil and rewrite_target == nil
    and p.limit_rps == 0 and p.limit_connections == 0 and p.allow[1] == nil and p.deny[1] == nil
    and policy.rpm == 0 and policy.traffic == nil
  if rewrite_target ~= nil then
    policy.rewrite_parts = target_parts(rewrite_target)
    policy.rewrite_query = rewrite_target:find("?", 1, true) ~= nil
  end
  if p.allow[1] ~= nil then
    policy.allow = assert(cidr.compile(p.allow))
  end
  if p.deny[1] ~= nil then
    policy.deny = assert(cidr.compile(p.deny))
  end
  if value(p.auth) ~= nil then -- lua/auth.lua: basic, digest, external, satisfy
    policy.auth = require("auth").compile(p.auth)
    policy.simple = false
  end
  policy.headers = headers.compile(p.headers)
  policy.mirror = mirror.compile(p.mirror)
  policy.deadline = deadline.compile(p.deadline)
  if p.limit_allow ~= nil and p.limit_allow[1] ~= nil then
    policy.limit_allow = assert(cidr.compile(p.limit_allow))
  end
  return policy
end

local function compile_location(l, policies)
  local backend = value(l.backend)
  local location = {
    backend = backend,
    name = backend or "redirect",
    policy = policies[l.policy],
    rewrite = value(l.rewrite),
    zone = value(l.zone),
  }
  if l.when ~= nil or l.split ~= nil then -- Gateway API: chosen per request (conditions.lua, weighted.lua)
    location.when = l.when and conditions.compile(l.when)
    location.split = l.split and weighted.compile(l.split)
    location.next = l.next and compile_location(l.next, policies)
  end
  return location
end

local function compile_host(h, policies)
  local host = { hsts = h.hsts, redirect = value(h.redirect), exact = {}, prefix = {}, longest = 0, regex = nil }
  host.client_tls = value(h.client_tls) -- auth-tls-*: checked first by route() (lua/client_tls.lua)
  for path, l in pairs(h.exact) do
    host.exact[path] = compile_location(l, policies)
  end
  for path, l in pairs(h.prefix) do
    if path == "/" then
      host.root = compile_location(l, policies)
    else
      local location = compile_location(l, policies)
      location.length = #path
      host.prefix[path] = location
      if #path > host.longest then
        host.longest = #path
      end
    end
  end
  if h.regex[1] ~= nil then
    host.regex = {}
    for i, l in ipairs(h.regex) do
      local location = compile_location(l, policies)
      location.pattern = l.pattern
      location.length = l.length
      host.regex[i] = location
    end
  end
  return host
end

-- A table compiling each entry of `raw` on first use: a new version costs a
-- worker the JSON decode, not the compilation of every host.
local function lazy(raw, compile, ...)
  local extra = { ... }
  return setmetatable({}, { __index = function(t, key)
    local entry = raw[key]
    if entry == nil then
      return nil
    end
    local compiled = compile(entry, extra[1])
    rawset(t, key, compiled)
    return compiled
  end })
end

-- What every shard without hosts compiles to: one table, not a lazy table,
-- metatable and closure for each of the 256 (most are empty at small sizes).
local EMPTY_SHARD = { hosts = {} }

--- One shard's `data` ({hosts, policies}, as posted) -> {hosts = lazily
-- compiled, names = data.hosts (what `assemble` drops from its cache when
-- this shard is replaced)}.
function M.compile_shard(data)
  if data == nil or next(data.hosts) == nil then
    return EMPTY_SHARD
  end
  return { hosts = lazy(data.hosts, compile_host, lazy(data.policies, compile_policy)), names = data.hosts }
end

-- Which shard serves a host name: crc32 of the name modulo the count, as
-- platformd.ingress.routes.shard_of computes it.
M.hash = ngx and ngx.crc32_short

--- `meta` (section "routes": catch-all, HSTS, ssl-redirect, shard count) and
-- the compiled shards -> the compiled table. Its `hosts` finds a name in its
-- shard and remembers what it found (not misses: any Host header may come).
-- `previous` (the table this one replaces, optional) and `dropped` (the
-- `names` of each shard replaced since): what did not change is kept
-- instead of built again per change. The parts compiled from `meta` (the
-- catch-all host, Gateway binds and wildcards, compiled eagerly) while meta
-- is the same decoded table; the cache of found hosts while `shards` is the
-- same list, minus the names of the replaced shards (a name is cached only
-- when found, so only names of a replaced shard can be stale). Rebuilt per
-- change, that cache was garbage in proportion to the hosts requests had
-- asked for (a 10,000-entry table when traffic reaches every host), and
-- binds and wildcards in proportion to the Gateway tables.
function M.assemble(meta, shards, previous, dropped)
  local compiled = {
    hosts = {},
    default = { exact = {}, prefix = {}, longest = 0 },
    hsts = nil,
    ssl_code = 308,
    port_suffix = "",
  }
  if meta == nil then
    return compiled
  end
  compiled.meta, compiled.shards = meta, shards
  if previous ~= nil and previous.meta == meta then
    compiled.hsts, compiled.ssl_code, compiled.port_suffix = previous.hsts, previous.ssl_code, previous.port_suffix
    compiled.default, compiled.binds, compiled.wildcards = previous.default, previous.binds, previous.wildcards
  else
    compiled.hsts = meta.hsts ~= "" and meta.hsts or nil
    compiled.ssl_code = meta.ssl_redirect.code
    if meta.ssl_redirect.port ~= 443 then
      compiled.port_suffix = ":" .. meta.ssl_redirect.port
    end
    compiled.default = compile_host(meta.default, lazy(meta.policies, compile_policy))
    compiled.binds = bound.compile(value(meta.binds), compile_host, lazy(meta.policies, compile_policy), null)
    compiled.wildcards = wildcards.compile(value(meta.wildcards), compile_host, lazy(meta.policies, compile_policy), null)
  end
  if previous ~= nil and previous.shards == shards then
    local cache = previous.hosts
    for _, names in ipairs(dropped or {}) do
      for name in pairs(names) do
        rawset(cache, name, nil)
      end
    end
    compiled.hosts = cache
    return compiled
  end
  local count = #shards
  local hash = M.hash
  compiled.hosts = setmetatable({}, { __index = function(t, name)
    local shard = shards[count == 1 and 1 or hash(name) % count + 1]
    local host = shard and shard.hosts[name]
    if host ~= nil then
      rawset(t, name, host)
    end
    return host
  end })
  return compiled
end

--- The whole table in one (`data` as util/schema validate_routes reads it:
-- hosts, default, policies, hsts, ssl_redirect) -> the compiled table. For
-- specs and tools; nginx assembles shards (see `current`).
function M.compile(data)
  if data == nil then
    return M.assemble(nil, {})
  end
  return M.assemble(data, { M.compile_shard(data) })
end

--- The host entry serving `name` (lower-case, no port).
function M.find(compiled, name)
  local binds, any = compiled.binds, nil
  if binds ~= nil then -- Gateways on their own address or port (lua/bound.lua)
    local host
    host, any = bound.find(binds, name)
    if host ~= nil then
      return host
    end
  end
  if name ~= nil then
    local host = compiled.hosts[name]
    if host ~= nil then
      return host
    end
    local dot = name:find(".", 1, true)
    if dot ~= nil then
      host = compiled.hosts["*" .. sub(name, dot)]
      if host ~= nil then
        return host
      end
      if compiled.wildcards ~= nil then -- a miss: Gateway wildcards cover more labels (lua/wildcards.lua)
        host = wildcards.find(compiled.wildcards, name, dot)
        if host ~= nil then
          return host
        end
      end
    end
  end
  return any or compiled.default
end

--- The longest Prefix location of `host` matching `uri`, or nil: one hash
-- lookup per "/"-bounded prefix of the URI no longer than the host's
-- longest Prefix path.
local function longest_prefix(host, uri)
  local prefix = host.prefix
  local n = #uri
  if n <= host.longest then
    local location = prefix[uri]
    if location ~= nil then
      return location
    end
  end
  local i = n < host.longest + 1 and n or host.longest + 1
  while i > 1 do
    if byte(uri, i) == SLASH then
      local location = prefix[sub(uri, 1, i - 1)]
      if location ~= nil then
        return location
      end
    end
    i = i - 1
  end
  return nil
end

--- The location of `host` answering `uri`, or nil (404).
function M.match(host, uri)
  local location = host.exact[uri]
  if location ~= nil then
    return location
  end
  if host.longest > 0 then
    location = longest_prefix(host, uri)
  end
  local regex = host.regex
  if regex ~= nil then
    -- Longest first: a regex wins only over a shorter Prefix path; a
    -- Prefix wins a tie (the order ingress-nginx gives use-regex hosts).
    local beat = location and location.length or 0
    local find = M.regex_find
    for i = 1, #regex do
      local candidate = regex[i]
      if candidate.length <= beat then
        break
      end
      if find(uri, candidate.pattern, "ijo") then
        return candidate
      end
    end
  end
  return location or host.root
end

---------------------------------------------------------------------------
-- nginx glue
---------------------------------------------------------------------------

-- This worker's table: the meta section and each shard follow their own
-- version, so a change decodes only the shards it touched.
local state = { meta_version = -1, meta = nil, versions = {}, shards = {}, routes = M.compile(nil) }
local seen_changes = nil -- as in balancer.refresh: skip the dict while no POST came
local SHARD_SECTIONS -- "routes_0" .. : built once, not per check

--- Bring `state` (as above) up to the versions in force: `version_of(section)`
-- -> number, `read(section)` -> decoded data or nil, `sections` the shards'
-- section names. Reads only the sections whose version moved; what the
-- others compiled to is kept (see `assemble`). Pure: the specs measure a
-- change's garbage through it (tests/lua/router_garbage_spec.lua).
function M.refresh(state, version_of, read, sections)
  local changed, dropped = false, nil
  local version = version_of("routes")
  if version ~= state.meta_version then
    state.meta, state.meta_version, changed = read("routes"), version, true
  end
  for i, section in ipairs(sections) do
    version = version_of(section)
    if version ~= state.versions[i] then
      local old = state.shards[i]
      if old ~= nil and old.names ~= nil then
        dropped = dropped or {}
        dropped[#dropped + 1] = old.names
      end
      state.shards[i], state.versions[i], changed = M.compile_shard(read(section)), version, true
    end
  end
  if changed then
    state.routes = M.assemble(state.meta, state.shards, state.routes, dropped)
  end
  return state.routes
end

local configuration -- loaded on first use (it needs the shared dict)
local function read_section(section)
  local _, data = configuration.routes(section)
  return data
end

local function current()
  local changes = changes_now()
  if changes == seen_changes then
    return state.routes
  end
  if SHARD_SECTIONS == nil then
    configuration = require("configuration")
    SHARD_SECTIONS = {}
    for i = 1, configuration.ROUTE_SHARDS do
      SHARD_SECTIONS[i] = "routes_" .. (i - 1)
    end
  end
  M.refresh(state, configuration.version, read_section, SHARD_SECTIONS)
  seen_changes = changes
  return state.routes
end

--- Build this worker's routing table ahead of its first request.
function M.warm()
  current()
end

-- Set by platform.init once every module is loaded.
local balancer

-- $platform_request (templates/nginx.conf.j2) -> whether there is a body /
-- the request came over TLS.
local HAS_BODY = { b = true, sb = true }
local TLS = { s = true, sb = true }

local function too_large(policy)
  local limit_bytes = policy.body_size
  if limit_bytes == 0 or not HAS_BODY[var_request()] then
    return false
  end
  local length = tonumber(ngx_var.http_content_length)
  if length ~= nil then
    return length > limit_bytes
  end
  if ngx_var.http_transfer_encoding == nil then
    return false
  end
  -- Chunked: nginx would count while reading; request bodies are buffered
  -- before proxying anyway (proxy_request_buffering on), so read and measure.
  ngx.req.read_body()
  local data = ngx.req.get_body_data()
  if data ~= nil then
    return #data > limit_bytes
  end
  local file = ngx.req.get_body_file()
  if file ~= nil then
    local f = io.open(file, "rb")
    if f ~= nil then
      local size = f:seek("end")
      f:close()
      return size > limit_bytes
    end
  end
  return false
end

local function ssl_redirect(routes, policy)
  local uri = traffic.redirect_uri(policy.traffic, ngx_var.request_uri)
  return ngx.redirect("https://" .. ngx_var.host .. routes.port_suffix .. uri, routes.ssl_code)
end

-- CORS: the origin to echo ("" none), and the preflight answer.
local function cors(policy)
  local c = policy.cors
  local origin = ngx_var.http_origin
  local allowed = ""
  if origin ~= nil and origin ~= "" then
    if c.origin_regex == nil then
      allowed = "*"
    elseif M.regex_find(origin, c.origin_regex, "ijo") then
      allowed = origin
    end
  end
  ngx_var.platform_cors_origin = allowed
  if c.credentials then
    ngx_var.platform_cors_credentials = "true"
  end
  if allowed ~= "" and ngx.req.get_method() == "OPTIONS" then
    local header = ngx.header
    header["Access-Control-Allow-Methods"] = c.methods
    header["Access-Control-Allow-Headers"] = c.headers
    header["Access-Control-Max-Age"] = c.max_age
    header["Content-Type"] = "text/plain; charset=utf-8"
    header["Content-Length"] = 0
    return ngx.exit(204)
  end
  if c.expose ~= nil then
    ngx_var.platform_cors_expose = c.expose
  end
end

local REWRITE_BUFFER = {}

local function rewrite(location, policy)
  local m = re_match(ngx_var.uri, location.rewrite, "jo")
  if m == nil then
    return
  end
  local parts = policy.rewrite_parts
  local buffer = REWRITE_BUFFER
  for i = 1, #parts do
    local part = parts[i]
    if type(part) == "number" then
      buffer[i] = m[part] or ""
    else
      buffer[i] = part
    end
  end
  local target = table.concat(buffer, "", 1, #parts)
  if target:find("^https?://") then
    local args = ngx_var.args
    if args ~= nil and not policy.rewrite_query then
      target = target .. "?" .. args
    end
    return ngx.redirect(target, ngx.HTTP_MOVED_TEMPORARILY)
  end
  if policy.rewrite_query then
    local path, query = target:match("^([^?]*)%?(.*)$")
    local args = ngx_var.args
    if args ~= nil and args ~= "" then
      query = query ~= "" and query .. "&" .. args or args
    end
    ngx.req.set_uri(path)
    ngx.req.set_uri_args(query)
  else
    ngx.req.set_uri(target)
  end
end

local function limits(location, policy)
  local addr = ngx_var.binary_remote_addr
  if policy.limit_allow ~= nil and cidr.contains(policy.limit_allow, addr) then
    return -- limit-allowlist
  end
  if policy.rpm > 0 and not limit.request(location.zone .. "m" .. addr, policy.rpm / 60, policy.rpm_burst) then
    return ngx.exit(policy.req_status)
  end
  if policy.rps > 0 and not limit.request(location.zone .. "r" .. addr, policy.rps, policy.burst) then
    return ngx.exit(policy.req_status)
  end
  if policy.connections > 0 then
    local key = location.zone .. "c" .. addr
    if not limit.acquire(key, policy.connections) then
      return ngx.exit(policy.conn_status)
    end
    ngx.ctx.platform_conn = key
  end
end

local function access_denied(policy)
  local addr = ngx_var.binary_remote_addr
  if policy.deny ~= nil and cidr.contains(policy.deny, addr) then
    return true
  end
  return policy.allow ~= nil and not cidr.contains(policy.allow, addr)
end

--- set_by_lua of `location /` (its result is $proxy_upstream_name): the
-- common request decided without a coroutine. The upstream name when it is
-- proxied from `location /` as it is (HSTS set); "" sends it through
-- `route()` in the rewrite phase. Reads $platform_request at most once.
local function fast()
  local routes = current()
  local host = M.find(routes, var_host())
  if host.redirect ~= nil or host.client_tls ~= nil then
    return ""
  end
  local location = M.match(host, var_uri())
  if location == nil then
    return ""
  end
  local policy = location.policy
  if not policy.simple or location.rewrite ~= nil or not balancer.plain(location.backend) then
    return ""
  end
  local request = nil
  if policy.body_size > 0 then
    request = var_request()
    if HAS_BODY[request] then
      return ""
    end
  end
  if policy.ssl_redirect and var_access_scheme() == "http" then
    return ""
  end
  if host.hsts and routes.hsts ~= nil then
    if request == nil then
      request = var_request()
    end
    if TLS[request] then
      ngx_var.platform_hsts = routes.hsts
    end
  end
  return location.name
end

function M.fast()
  local name = fast()
  balancer.routed(name)
  return name
end

--- rewrite_by_lua of `location /` (lane nil) and of each named lane.
function M.route(lane)
  local routes = current()
  local host = M.find(routes, var_host())
  local redirect = host.redirect
  if redirect ~= nil then
    ngx_var.proxy_upstream_name = "redirect"
    if redirect.host ~= nil then -- from-to-www-redirect (platformd.ingress.www_redirect)
      return ngx.redirect(var_access_scheme() .. "://" .. redirect.host .. ngx_var.request_uri, redirect.code)
    end
    return ngx.redirect(redirect.target, redirect.code)
  end
  local location = M.match(host, var_uri())
  if location ~= nil and location.when ~= nil then -- Gateway API matches: walk with the conditions
    location = conditions.route(host, var_uri())
  end
  if location == nil then
    ngx_var.proxy_upstream_name = "default-404"
    return ngx.exit(ngx.HTTP_NOT_FOUND)
  end
  local policy = location.policy
  ngx_var.proxy_upstream_name = location.name
  if host.client_tls ~= nil and lane == nil then
    client_tls.check(host.client_tls, policy.ssl_redirect or not policy.proxy)
  end
  if policy.proxy and lane == nil and not (policy.fast and balancer.plain(location.backend)) then
    return ngx.exec(policy.lane)
  end
  if too_large(policy) then
    return ngx.exit(413)
  end
  if policy.ssl_redirect and var_access_scheme() == "http" then
    return ssl_redirect(routes, policy)
  end
  if not policy.proxy then
    if policy.request_redirect ~= nil then
      return request_redirect.answer(policy.request_redirect)
    end
    return ngx.redirect(policy.redirect.target, policy.redirect.code)
  end
  if policy.cors ~= nil then
    cors(policy)
  end
  if host.hsts and routes.hsts ~= nil and TLS[var_request()] then
    ngx_var.platform_hsts = routes.hsts
  end
  if location.rewrite ~= nil then
    rewrite(location, policy)
  end
  if policy.rps > 0 or policy.connections > 0 or policy.rpm > 0 then
    limits(location, policy)
  end
  if policy.auth ~= nil then
    local address = nil -- what the allow/deny lists say: nil (nothing), "denied", "allowed"
    if policy.deny ~= nil or policy.allow ~= nil then
      address = access_denied(policy) and "denied" or (policy.allow ~= nil and "allowed" or nil)
    end
    require("auth").access(policy.auth, address)
  elseif (policy.deny ~= nil or policy.allow ~= nil) and access_denied(policy) then
    return ngx.exit(ngx.HTTP_FORBIDDEN)
  end
  if location.split ~= nil then -- Gateway API weighted backends; nil: an invalid backend's share
    local name = weighted.pick(location.split)
    ngx_var.proxy_upstream_name = name or "invalid-backend"
    if name == nil then
      return ngx.exit(ngx.HTTP_INTERNAL_SERVER_ERROR)
    end
  end
  if lane ~= nil then
    if policy.headers ~= nil then
      headers.run(policy.headers)
    end
    if policy.mirror ~= nil then
      mirror.prepare(policy.mirror)
    end
    ngx_var.platform_scheme = policy.auto_scheme and ngx_var.scheme or policy.scheme
    ngx_var.platform_upstream_host = policy.upstream_vhost or ngx_var.host
    ngx.ctx.platform_timeouts = policy.timeouts
    if policy.deadline ~= nil then -- Gateway API timeouts, per attempt (lua/deadline.lua)
      ngx.ctx.platform_deadline = policy.deadline
    end
    if policy.traffic ~= nil then
      traffic.apply(policy.traffic, location.rewrite ~= nil)
    end
    return balancer.access()
  end
end

--- log_by_lua of the named lanes.
function M.log()
  local ctx = ngx.ctx
  local key = ctx.platform_conn
  if key ~= nil then
    limit.release(key)
  end
  balancer.log()
end

function M.init()
  balancer = require("balancer")
  limit = require("util.limit")
  mirror.init()
  client_tls = require("client_tls")
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(target_parts, compile_policy, compile_location, compile_host, M.compile_shard,
  M.compile, M.refresh, read_section)
require("util.cold").own(lazy, M.assemble)

return M
