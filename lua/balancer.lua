--- Balancer registry and the phase entry points of proxied locations.
--
-- Registry: one module per algorithm in lua/balancer/, all with the interface
--   M.new(backend, deps) -> instance      deps = {random, store, now}
--   instance:sync(backend)                same algorithm, new endpoints/options
--   instance:balance(request) -> endpoint | nil
--   instance:after_balance(request)       optional, log phase
--   instance:is_affinitized(request)      optional (sticky): the request
--                                         carries a session of this backend
-- where `request` offers `var(name)`, `cookie(name)`, `set_cookie(header)`.
-- Which module serves a backend (`M.algorithm_for`): `upstream_hash_by` set ->
-- chash; else cookie affinity -> sticky_<mode>; else `load_balance`
-- (round_robin when empty), as docs/architecture.md orders them.
--
-- Phases. The router (router.lua) keeps a route whose backend is "plain"
-- (round robin or consistent hashing, no canary: `M.plain`) on its fast
-- path, where only balance() runs and does all the work; a route to any
-- other backend (canaries, cookie affinity, EWMA) goes to a named lane,
-- where the router calls access() and the log phase calls log(). This
-- module alone decides which backends are plain (`M.needs_access`).
--   access()   refresh the backends if the shared version moved (checked
--              per request, no timer), pick the backend (canary.lua) and
--              the endpoint into ngx.ctx, set any sticky cookie; 503 when the
--              chosen backend is unknown or has no endpoints.
--   balance()  hand the endpoint to nginx: the one access() picked, or pick
--              it here. Without a backend or endpoints the request goes to
--              `M.unavailable`, an internal server answering 503 (the
--              balancer phase cannot end a request with a status of its own:
--              ngx.exit there gives 500). On a retry (the previous peer failed
--              to connect or answer, per proxy_next_upstream) take the next
--              endpoint not tried yet.
--   log()      feed response times back (EWMA).
-- Per-worker state follows the shared version: after a delta (an endpoint
-- change) only the entries it names are rebuilt, in place; a worker that is
-- new or fell behind the chain (configuration.backends_since) rebuilds every
-- entry and swaps the table with one assignment. Either way balancer
-- instances of unchanged algorithm are kept and `sync`ed, so round-robin
-- positions and EWMA in-flight counts survive, and instances of backends a
-- delta does not name are not touched at all.
-- Hot path (plain requests): one load of the shared change counter (the
-- dict is read only after a POST, util/changes.lua), the upstream name
-- router.fast() handed over (M.routed), else one read of
-- $proxy_upstream_name with its hash computed once (util/variable.lua), one
-- table lookup, the algorithm's pick, set_current_peer (address and port
-- apart: nginx parses that fastest); get_last_failure and set_more_tries
-- only for backends with more than one endpoint; no table allocated and no
-- string built per request. bench/bench_dataplane.py counts its instructions.
local ngx_balancer = require("ngx.balancer")
local configuration = require("configuration")
local canary = require("canary")
local endpoint_key = require("util.endpoint").key
local upstream_name = require("util.variable").reader("proxy_upstream_name")
local changes_now = require("util.changes").current

local ngx = ngx
local ngx_var = ngx.var
local version_of = configuration.version
local set_current_peer = ngx_balancer.set_current_peer
local set_more_tries = ngx_balancer.set_more_tries
local get_last_failure = ngx_balancer.get_last_failure
local set_timeouts = ngx_balancer.set_timeouts

local M = {}

M.registry = {
  round_robin = require("balancer.round_robin"),
  ewma = require("balancer.ewma"),
  chash = require("balancer.chash"),
  chash_subset = require("balancer.chash_subset"),
  sticky_balanced = require("balancer.sticky_balanced"),
  sticky_persistent = require("balancer.sticky_persistent"),
}

-- Extra attempts after the first on connect/upstream failure, bounded again
-- by the backend's endpoint count and by proxy_next_upstream_tries.
M.MAX_RETRIES = 2

-- {address, port} of the internal server answering 503 (platform.init sets
-- it from the template); nil leaves such requests to fail with a 502.
M.unavailable = nil

function M.algorithm_for(backend)
  if backend.upstream_hash_by ~= nil and backend.upstream_hash_by ~= "" then
    return backend.upstream_hash_by_subset_size ~= nil and "chash_subset" or "chash"
  end
  local affinity = backend.session_affinity
  if affinity ~= nil and affinity.type == "cookie" then
    return "sticky_" .. (affinity.mode or "balanced")
  end
  return backend.load_balance or "round_robin"
end

--- Whether requests for `backend` need the access phase (see the header).
-- Decided here only; the controller does not know it.
function M.needs_access(backend, algorithm)
  local alternatives = backend.alternative_backends
  return (alternatives ~= nil and alternatives[1] ~= nil)
    or algorithm == "ewma" or algorithm == "sticky_balanced" or algorithm == "sticky_persistent"
end

local DEPS = {
  random = math.random,
  store = ngx.shared.platform_balancer,
  now = ngx.now,
}

local CANARY_DEPS = {
  random = math.random,
  match = function(subject, pattern)
    local from, _, err = ngx.re.find(subject, pattern, "jo")
    if err then
      ngx.log(ngx.ERR, "canary header pattern: ", err)
    end
    return from ~= nil
  end,
}

-- ngx.var names, built once per name instead of once per request. Names come
-- from the configuration (cookie names), so the table stays small.
local cookie_vars = setmetatable({}, { __index = function(t, name)
  local var = "cookie_" .. name
  t[name] = var
  return var
end })

local function header_var(name)
  return "http_" .. name:lower():gsub("-", "_")
end

-- The worker's view: one entry per backend name, replaced whole by `rebuild`
-- or patched by `apply_deltas`.
--   entry = {backend, instance, algorithm, plain, retries, header_var, cookie_var}
-- `plain`: no access phase needed; `retries`: extra attempts for a request
-- (endpoints - 1, at most MAX_RETRIES); `header_var`/`cookie_var`: ngx.var
-- names of a canary's policy header and cookie (nil when unset).
local state = { version = -1, entries = {} }

local function entry_for(backend, previous)
  local algorithm = M.algorithm_for(backend)
  local instance
  if previous ~= nil and previous.algorithm == algorithm then
    instance = previous.instance
    instance:sync(backend)
  else
    instance = M.registry[algorithm].new(backend, DEPS)
  end
  local policy = backend.traffic_shaping_policy
  return {
    backend = backend,
    instance = instance,
    algorithm = algorithm,
    plain = not M.needs_access(backend, algorithm),
    retries = math.max(math.min(#backend.endpoints - 1, M.MAX_RETRIES), 0),
    header_var = policy and policy.header and policy.header ~= "" and header_var(policy.header) or nil,
    -- affinity-canary-behavior "legacy": this backend's sessions do not decide canary routing.
    legacy_canary = backend.session_affinity ~= nil and backend.session_affinity.canary_behavior == "legacy",
    cookie_var = policy and policy.cookie and policy.cookie ~= "" and cookie_vars[policy.cookie] or nil,
  }
end

local function rebuild(version, list)
  local entries = {}
  for _, backend in ipairs(list) do
    entries[backend.name] = entry_for(backend, state.entries[backend.name])
  end
  state = { version = version, entries = entries }
end

-- In place: refresh never yields (shared-dict reads only), so no request of
-- this worker sees an entries table with half a delta applied.
local function apply_deltas(version, deltas)
  local entries = state.entries
  for _, delta in ipairs(deltas) do
    for _, name in ipairs(delta.remove) do
      entries[name] = nil
    end
    for _, backend in ipairs(delta.upsert) do
      entries[backend.name] = entry_for(backend, entries[backend.name])
    end
  end
  state.version = version
end

-- The change counter (util/changes.lua) seen when the version was last
-- compared: while it stays, no POST moved any version, so the dict is not read.
local seen_changes = nil

local function refresh()
  local changes = changes_now()
  if changes == seen_changes then
    return
  end
  if version_of("backends") ~= state.version then
    local version, list, deltas = configuration.backends_since(state.version)
    if deltas ~= nil then
      apply_deltas(version, deltas)
    else
      rebuild(version, list)
    end
  end
  seen_changes = changes -- only once caught up: an error above retries next time
end

--- Build this worker's state now instead of on its first request (see
-- platform.init_worker): at 20,000 backends a cold build takes ~100 ms.
M.warm = refresh

--- Whether requests for the backend `name` need no access or log phase
-- (router.lua keeps such routes on the fast path); unknown backends too:
-- the balancer sends them to the 503 server.
function M.plain(name)
  refresh()
  local entry = state.entries[name]
  return entry == nil or entry.plain
end

-- For specs: the worker's entries (read-only).
function M._entries()
  return state.entries
end

local function add_set_cookie(value)
  local current = ngx.header["Set-Cookie"]
  if current == nil then
    ngx.header["Set-Cookie"] = value
  elseif type(current) == "table" then
    current[#current + 1] = value
    ngx.header["Set-Cookie"] = current
  else
    ngx.header["Set-Cookie"] = { current, value }
  end
end

-- Response headers cannot be touched in the balancer phase: a pick made
-- there (see M.balance) skips the Set-Cookie, and the next request re-picks.
local function skip_set_cookie()
  ngx.log(ngx.INFO, "sticky cookie not set: endpoint picked in the balancer phase")
end

local function var(name)
  return ngx_var[name]
end

local function cookie(name)
  return ngx_var[cookie_vars[name]]
end

-- The request as plain backends' balancers see it. Shared by all requests:
-- round robin and consistent hashing only read through it.
local PLAIN_REQUEST = { var = var, cookie = cookie, set_cookie = skip_set_cookie }

local function new_request(can_set_cookie)
  return { var = var, cookie = cookie, set_cookie = can_set_cookie and add_set_cookie or skip_set_cookie }
end

local function affinitized(name, request)
  local entry = state.entries[name]
  if entry ~= nil and entry.legacy_canary then
    return false
  end
  local instance = entry and entry.instance
  return instance ~= nil and instance.is_affinitized ~= nil and instance:is_affinitized(request)
end

local NONE = {}
-- canary.use_alternative's inputs, refilled for each decision: it runs to
-- completion without yielding, so one table per worker serves every request.
local INPUTS = {}

local function choose_backend(entry, request)
  local backend = entry.backend
  for _, name in ipairs(backend.alternative_backends or NONE) do
    local alternative = state.entries[name]
    local policy = alternative and alternative.backend.traffic_shaping_policy
    if policy and #alternative.backend.endpoints > 0 then
      local affinity = nil
      if affinitized(backend.name, request) then
        affinity = "primary"
      elseif affinitized(name, request) then
        affinity = "alternative"
      end
      INPUTS.header = alternative.header_var and ngx_var[alternative.header_var] or nil
      INPUTS.cookie = alternative.cookie_var and ngx_var[alternative.cookie_var] or nil
      INPUTS.affinity = affinity
      if canary.use_alternative(policy, INPUTS, CANARY_DEPS) then
        return alternative
      end
    end
  end
  return entry
end

--- Choose backend and endpoint for this request into ngx.ctx.platform, or
-- return a status to end the request with.
local function pick(can_set_cookie)
  refresh()
  local name = ngx_var.proxy_upstream_name
  local entry = name and state.entries[name]
  if entry == nil then
    ngx.log(ngx.WARN, "no backend named ", tostring(name))
    return nil, ngx.HTTP_SERVICE_UNAVAILABLE
  end
  local request = new_request(can_set_cookie)
  entry = choose_backend(entry, request)
  local endpoint = entry.instance:balance(request)
  if endpoint == nil then
    return nil, ngx.HTTP_SERVICE_UNAVAILABLE
  end
  local chosen = {
    backend = entry.backend,
    instance = entry.instance,
    retries = M.retries(entry, ngx.ctx.platform_retries),
    request = request,
    endpoint = endpoint,
    tried = {},
  }
  ngx.ctx.platform = chosen
  return chosen
end

function M.access()
  refresh()
  local entry = state.entries[ngx_var.proxy_upstream_name]
  if entry ~= nil and entry.plain then
    -- A plain backend in a named lane (HTTPS or gRPC upstreams, which the
    -- plain-HTTP 503 server cannot answer, or settings of its own): answer
    -- 503 here, leave the pick to balance().
    if entry.backend.endpoints[1] == nil then
      return ngx.exit(ngx.HTTP_SERVICE_UNAVAILABLE)
    end
    return
  end
  local _, status = pick(true)
  if status then
    return ngx.exit(status)
  end
end

--- The endpoint of `endpoints` after the one keyed `last` that is not in `tried`.
local function next_untried(endpoints, tried, last)
  local start = 1
  for i, endpoint in ipairs(endpoints) do
    if endpoint_key(endpoint) == last then
      start = i
      break
    end
  end
  local n = #endpoints
  for offset = 1, n do
    local endpoint = endpoints[(start + offset - 1) % n + 1]
    if not tried[endpoint_key(endpoint)] then
      return endpoint
    end
  end
  return nil
end

local function set_peer(endpoint)
  local ok, err = set_current_peer(endpoint.address, endpoint.port)
  if not ok then
    ngx.log(ngx.ERR, "set_current_peer ", endpoint_key(endpoint), ": ", err)
    return ngx.exit(ngx.ERROR)
  end
end

local function unavailable()
  local peer = M.unavailable
  if peer == nil then
    return ngx.exit(ngx.ERROR)
  end
  return set_peer(peer)
end

local function log_retry(last)
  local state_name, code = get_last_failure()
  ngx.log(ngx.INFO, "upstream ", tostring(last), " failed (", tostring(state_name), " ", tostring(code), "), retrying")
end

--- session-cookie-change-on-failure: the session cookie now names `endpoint`
-- (replacing one this request set already). nginx has sent no header yet,
-- so the balancer phase may still set response headers.
function M.repin(instance, affinity, endpoint)
  local value = instance:cookie_for(endpoint)
  if value == nil then
    return
  end
  local prefix = require("util.cookie").name(affinity.cookie) .. "="
  local kept = {}
  local current = ngx.header["Set-Cookie"]
  if type(current) == "string" then
    current = { current }
  end
  for _, header in ipairs(current or NONE) do
    if header:sub(1, #prefix) ~= prefix then
      kept[#kept + 1] = header
    end
  end
  kept[#kept + 1] = value
  ngx.header["Set-Cookie"] = kept
end

--- Balancer phase for a pick made by `pick` (access phase or just now).
local function balance_chosen(chosen)
  local endpoint = chosen.endpoint
  local tried = chosen.tried
  if #tried == 0 then
    if chosen.retries > 0 then
      set_more_tries(chosen.retries)
    end
  else
    local last = tried[#tried]
    log_retry(last)
    local affinity = chosen.backend.session_affinity
    local instance = chosen.instance
    if affinity ~= nil and not affinity.change_on_failure and instance.is_affinitized ~= nil
        and instance:is_affinitized(chosen.request) then
      -- As ingress-nginx: a request of an existing session stays on its
      -- endpoint, failed or not, unless session-cookie-change-on-failure is
      -- set; a new session moves on (and its cookie with it).
      endpoint = chosen.endpoint
    else
      local seen = {}
      for _, key in ipairs(tried) do
        seen[key] = true
      end
      endpoint = next_untried(chosen.backend.endpoints, seen, last) or endpoint
      if affinity ~= nil and chosen.instance.cookie_for ~= nil then
        M.repin(chosen.instance, affinity, endpoint)
      end
    end
  end
  tried[#tried + 1] = endpoint_key(endpoint)
  return set_peer(endpoint)
end

--- Peers nginx already tried for this request, from $upstream_addr
-- ("a:1, b:2"; " : " separates internal redirects). Read on retries only.
local function tried_peers()
  local tried, last = {}, nil
  for peer in (ngx_var.upstream_addr or ""):gmatch("[^,%s]+") do
    if peer ~= ":" then
      tried[peer] = true
      last = peer
    end
  end
  return tried, last
end

-- The upstream name router.fast() chose for the request it ran for last, so
-- that request's balancer phase skips reading it back from
-- $proxy_upstream_name (an FFI call into nginx and a Lua string: ~500
-- instructions, more when the string table is crowded). Any other request
-- (one whose body was read in between, a lane, a retry after another
-- request was routed) reads the variable. Every request of the public
-- server runs fast() first, so a request whose memory reuses a finished
-- one's address overwrites the record before its balancer runs.
local routed_request, routed_name = nil, nil
-- Outside nginx (the busted specs) there is no request: always the variable.
local ok_base, base = pcall(require, "resty.core.base")
local get_request = ok_base and base.get_request or function() return nil end

--- router.fast() decided `name` for this request ("": it did not).
function M.routed(name)
  if name == "" then
    routed_request = nil
  else
    routed_request, routed_name = get_request(), name
  end
end

--- Extra attempts for a request to `entry`: the route's (`route_retries`,
-- proxy-next-upstream-tries, lua/traffic.lua) or the default, never more
-- than the other endpoints.
function M.retries(entry, route_retries)
  if route_retries == nil then
    return entry.retries
  end
  return math.max(math.min(#entry.backend.endpoints - 1, route_retries), 0)
end

-- `route_retries`: the route's proxy-next-upstream-tries (named lanes only).
function M.balance(route_retries)
  refresh()
  local name
  if routed_request ~= nil and get_request() == routed_request then
    name = routed_name
  else
    name = upstream_name()
  end
  local entry = state.entries[name]
  if entry == nil then
    return unavailable()
  end
  if not entry.plain then
    -- No pick from the access phase: an internal redirect, or a location
    -- rendered before its backend changed (until the reload). Pick here,
    -- without Set-Cookie.
    local chosen = ngx.ctx.platform or pick(false)
    if chosen == nil then
      return unavailable()
    end
    return balance_chosen(chosen)
  end
  local retries = entry.retries
  if route_retries ~= nil then
    retries = M.retries(entry, route_retries)
  end
  if retries > 0 then
    -- Only a request given more tries comes back after a failure (with one
    -- endpoint nginx has a single try), so only such a request asks.
    if get_last_failure() ~= nil then
      local tried, last = tried_peers()
      log_retry(last)
      local endpoint = next_untried(entry.backend.endpoints, tried, last)
      if endpoint == nil then
        return unavailable()
      end
      return set_peer(endpoint)
    end
    set_more_tries(retries)
  end
  local endpoint = entry.instance:balance(PLAIN_REQUEST)
  if endpoint == nil then
    return unavailable()
  end
  return set_peer(endpoint)
end

--- "ip:port" of an endpoint of backend `name` chosen as a plain request
-- would be, or nil (none): where a mirrored copy goes (lua/mirror.lua).
function M.endpoint_of(name)
  refresh()
  local entry = state.entries[name]
  local endpoint = entry and entry.instance:balance(PLAIN_REQUEST)
  if endpoint == nil then
    return nil
  end
  local address = endpoint.address
  if address:find(":", 1, true) then
    address = "[" .. address .. "]"
  end
  return address .. ":" .. endpoint.port
end

--- Balancer phase of `upstream_lane` (the router's named lanes): the
-- route's timeouts (router.lua puts them in ngx.ctx), then as balance().
function M.balance_lane()
  local ctx = ngx.ctx
  local timeouts = ctx.platform_timeouts
  if ctx.platform_deadline ~= nil then -- Gateway API timeouts: this attempt's, in ms (lua/deadline.lua)
    local ok, err = set_timeouts(require("deadline").timeouts(ctx.platform_deadline))
    if not ok then
      ngx.log(ngx.ERR, "set_timeouts: ", err)
    end
  elseif timeouts ~= nil then
    local ok, err = set_timeouts(timeouts[1], timeouts[2], timeouts[3])
    if not ok then
      ngx.log(ngx.ERR, "set_timeouts: ", err)
    end
  end
  return M.balance(ctx.platform_retries)
end

local function split(list)
  local out = {}
  for item in (list or ""):gmatch("[^,%s:]+") do
    out[#out + 1] = item
  end
  return out
end

function M.log()
  local chosen = ngx.ctx.platform
  if chosen == nil or chosen.instance.after_balance == nil then
    return
  end
  -- nginx lists one entry per attempt; " : " separates internal redirects,
  -- whose entries we simply read as further attempts.
  local times = split(ngx.var.upstream_response_time)
  local headers = split(ngx.var.upstream_header_time)
  local attempts = {}
  for i, key in ipairs(chosen.tried) do
    local last = i == #chosen.tried
    attempts[i] = {
      key = key,
      seconds = tonumber(times[i]),
      failed = not last or headers[i] == nil or headers[i] == "-",
    }
  end
  chosen.request.attempts = attempts
  chosen.instance:after_balance(chosen.request)
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.algorithm_for, M.needs_access, header_var, entry_for, rebuild, apply_deltas)

return M
