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
-- Phases:
--   access()   refresh the backends if the shared version moved (one dict
--              read per request, no timer), pick the backend (canary.lua) and
--              the endpoint, set any sticky cookie; 503 when the chosen
--              backend is unknown or has no endpoints.
--   balance()  hand the endpoint to nginx; on a retry (the previous peer
--              failed to connect or answer, per proxy_next_upstream) take the
--              next endpoint of the backend not tried yet.
--   log()      feed response times back (EWMA).
-- Per-worker state is rebuilt as a whole on a version change and swapped with
-- one assignment; balancer instances of unchanged algorithm are kept and
-- `sync`ed so round-robin positions and EWMA in-flight counts survive.
local ngx_balancer = require("ngx.balancer")
local configuration = require("configuration")
local canary = require("canary")
local endpoint_key = require("util.endpoint").key

local M = {}

M.registry = {
  round_robin = require("balancer.round_robin"),
  ewma = require("balancer.ewma"),
  chash = require("balancer.chash"),
  sticky_balanced = require("balancer.sticky_balanced"),
  sticky_persistent = require("balancer.sticky_persistent"),
}

-- Extra attempts after the first on connect/upstream failure, bounded again
-- by the backend's endpoint count and by proxy_next_upstream_tries.
M.MAX_RETRIES = 2

function M.algorithm_for(backend)
  if backend.upstream_hash_by ~= nil and backend.upstream_hash_by ~= "" then
    return "chash"
  end
  local affinity = backend.session_affinity
  if affinity ~= nil and affinity.type == "cookie" then
    return "sticky_" .. (affinity.mode or "balanced")
  end
  return backend.load_balance or "round_robin"
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

-- The worker's view: whole tables, replaced together by `rebuild`.
local state = { version = -1, backends = {}, balancers = {}, algorithms = {} }

local function rebuild(version, list)
  local backends, balancers, algorithms = {}, {}, {}
  for _, backend in ipairs(list) do
    local name = backend.name
    local algorithm = M.algorithm_for(backend)
    local instance = state.balancers[name]
    if instance ~= nil and state.algorithms[name] == algorithm then
      instance:sync(backend)
    else
      instance = M.registry[algorithm].new(backend, DEPS)
    end
    backends[name], balancers[name], algorithms[name] = backend, instance, algorithm
  end
  state = { version = version, backends = backends, balancers = balancers, algorithms = algorithms }
end

local function refresh()
  if configuration.version("backends") ~= state.version then
    rebuild(configuration.backends())
  end
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

local function new_request(can_set_cookie)
  return {
    var = function(name) return ngx.var[name] end,
    cookie = function(name) return ngx.var["cookie_" .. name] end,
    set_cookie = can_set_cookie and add_set_cookie or skip_set_cookie,
  }
end

local function header_var(name)
  return "http_" .. name:lower():gsub("-", "_")
end

local function affinitized(name, request)
  local instance = state.balancers[name]
  return instance ~= nil and instance.is_affinitized ~= nil and instance:is_affinitized(request)
end

local function choose_backend(backend, request)
  for _, name in ipairs(backend.alternative_backends or {}) do
    local alternative = state.backends[name]
    local policy = alternative and alternative.traffic_shaping_policy
    if policy and #alternative.endpoints > 0 then
      local affinity = nil
      if affinitized(backend.name, request) then
        affinity = "primary"
      elseif affinitized(name, request) then
        affinity = "alternative"
      end
      local inputs = {
        header = policy.header and policy.header ~= "" and ngx.var[header_var(policy.header)] or nil,
        cookie = policy.cookie and policy.cookie ~= "" and ngx.var["cookie_" .. policy.cookie] or nil,
        affinity = affinity,
      }
      if canary.use_alternative(policy, inputs, CANARY_DEPS) then
        return alternative
      end
    end
  end
  return backend
end

--- Choose backend and endpoint for this request into ngx.ctx.platform, or
-- return a status to end the request with.
local function pick(can_set_cookie)
  refresh()
  local name = ngx.var.proxy_upstream_name
  local backend = name and state.backends[name]
  if backend == nil then
    ngx.log(ngx.WARN, "no backend named ", tostring(name))
    return nil, ngx.HTTP_SERVICE_UNAVAILABLE
  end
  local request = new_request(can_set_cookie)
  backend = choose_backend(backend, request)
  local instance = state.balancers[backend.name]
  local endpoint = instance:balance(request)
  if endpoint == nil then
    return nil, ngx.HTTP_SERVICE_UNAVAILABLE
  end
  local chosen = {
    backend = backend,
    instance = instance,
    request = request,
    endpoint = endpoint,
    tried = {},
  }
  ngx.ctx.platform = chosen
  return chosen
end

function M.access()
  local _, status = pick(true)
  if status then
    return ngx.exit(status)
  end
end

--- The next endpoint of `backend` after the last tried one that was not tried.
local function next_untried(chosen)
  local endpoints = chosen.backend.endpoints
  local tried = {}
  for _, key in ipairs(chosen.tried) do
    tried[key] = true
  end
  local last = chosen.tried[#chosen.tried]
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

function M.balance()
  local chosen = ngx.ctx.platform
  if chosen == nil then
    -- Access phase did not run here (e.g. after an internal redirect).
    local status
    chosen, status = pick(false)
    if chosen == nil then
      return ngx.exit(status)
    end
  end
  local endpoint = chosen.endpoint
  if #chosen.tried == 0 then
    local more = math.min(#chosen.backend.endpoints - 1, M.MAX_RETRIES)
    if more > 0 then
      ngx_balancer.set_more_tries(more)
    end
  else
    local state_name, code = ngx_balancer.get_last_failure()
    ngx.log(ngx.INFO, "upstream ", chosen.tried[#chosen.tried], " failed (", tostring(state_name),
      " ", tostring(code), "), retrying")
    endpoint = next_untried(chosen) or endpoint
  end
  chosen.tried[#chosen.tried + 1] = endpoint_key(endpoint)
  local ok, err = ngx_balancer.set_current_peer(endpoint.address, endpoint.port)
  if not ok then
    ngx.log(ngx.ERR, "set_current_peer ", endpoint_key(endpoint), ": ", err)
    return ngx.exit(ngx.ERROR)
  end
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

return M
