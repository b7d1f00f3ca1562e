-- Shared fixtures for the busted specs (not a spec itself).
local M = {}

function M.endpoints(n, base_port)
  local out = {}
  for i = 1, n do
    out[i] = { address = "10.0.0." .. i, port = base_port or 8080 }
  end
  return out
end

--- Deterministic random(n) -> 1..n (a linear congruential generator), so specs
-- never depend on math.random's sequence on this Lua version.
function M.random(seed)
  local state = seed or 12345
  return function(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return math.floor(state / 2147483648 * n) + 1
  end
end

--- A dict with the get/set part of ngx.shared.DICT.
function M.store()
  local data = {}
  return {
    get = function(_, key) return data[key] end,
    set = function(_, key, value) data[key] = value return true end,
    data = data,
  }
end

--- A fake clock: `clock.now()`, `clock.advance(s)`.
function M.clock(start)
  local t = start or 1000
  return {
    now = function() return t end,
    advance = function(s) t = t + s end,
  }
end

--- A request as balancer.lua builds it, with given variables and cookies;
--- Set-Cookie values are collected in `request.cookies_set`.
function M.request(vars, cookies)
  local request = { cookies_set = {} }
  request.var = function(name) return (vars or {})[name] end
  request.cookie = function(name) return (cookies or {})[name] end
  request.set_cookie = function(value) table.insert(request.cookies_set, value) end
  return request
end

function M.deps(seed)
  local clock = M.clock()
  return { random = M.random(seed), store = M.store(), now = clock.now, clock = clock }
end

function M.count(balancer, times, make_request)
  local counts = {}
  for _ = 1, times do
    local endpoint = balancer:balance(make_request and make_request() or M.request())
    local key = endpoint.address .. ":" .. endpoint.port
    counts[key] = (counts[key] or 0) + 1
  end
  return counts
end

--- Load module `name` afresh with `_G.ngx = fake_ngx` and `package.loaded`
-- entries replaced by `stubs`, call `fn(module, ...)`, then put everything
-- back (also when `fn` fails, whose error is re-raised).
function M.with_module(name, fake_ngx, stubs, fn, ...)
  local saved_ngx, saved = _G.ngx, {}
  _G.ngx = fake_ngx
  for stub_name, stub in pairs(stubs) do
    saved[stub_name] = package.loaded[stub_name]
    package.loaded[stub_name] = stub
  end
  package.loaded[name] = nil
  local ok, err = pcall(function(...) return fn(require(name), ...) end, ...)
  package.loaded[name] = nil
  for stub_name in pairs(stubs) do
    package.loaded[stub_name] = saved[stub_name]
  end
  _G.ngx = saved_ngx
  if not ok then error(err, 0) end
end

--- The `deps` util.schema takes, as the specs use them: `null` (a sentinel
-- that prints as "null"), `regex_ok` refusing a "(" without ")" (the specs'
-- stand-in for PCRE), `pem_ok` wanting a "BEGIN CERTIFICATE" line.
function M.schema_deps()
  return {
    null = setmetatable({}, { __tostring = function() return "null" end }),
    regex_ok = function(pattern)
      if pattern:find("(", 1, true) and not pattern:find(")", 1, true) then
        return nil, "missing )"
      end
      return true
    end,
    pem_ok = function(pem)
      if pem:find("BEGIN CERTIFICATE", 1, true) then
        return true
      end
      return nil, "not a PEM"
    end,
  }
end

--- A minimal valid "routes" section (util.schema.validate_routes_meta) with
-- `extra`'s fields added.
function M.routes_meta(extra)
  local meta = {
    default = { hsts = false, exact = {}, prefix = {}, regex = {} },
    policies = {}, hsts = "", ssl_redirect = { code = 308, port = 443 }, shards = 16,
  }
  for k, v in pairs(extra) do
    meta[k] = v
  end
  return meta
end

return M
