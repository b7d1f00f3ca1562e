--- Validation and normalisation of configuration payloads.
--
-- Pure Lua: everything nginx-specific (the JSON null sentinel, compiling a
-- regex, parsing a PEM) is injected through `deps`:
--   deps.null                       value the JSON decoder uses for null
--   deps.regex_ok(pattern)          -> true | nil, err
--   deps.pem_ok(pem)                -> true | nil, err   (certificates only)
--
-- Each `validate_<section>(data, deps)` returns a normalised copy of `data`
-- or `nil, "<path>: <problem>"`. The copy keeps only the fields the Lua side
-- uses, with JSON nulls turned into absent fields, so balancers never see the
-- null sentinel. Unknown fields are ignored (the controller may send more than
-- Lua needs); known fields with the wrong type or value are errors, because a
-- silently defaulted field is a misrouted request.
local M = {}

-- Interpreted (util/cold.lua): validation runs once per pushed section,
-- through a generic reader with a branch per field kind; compiled, it cost
-- each worker ~300 traces over its first ~1,000 route changes.
require("util.cold").module()

M.ALGORITHMS = { round_robin = true, ewma = true, chash = true }
M.AFFINITY_MODES = { balanced = true, persistent = true }
M.SAMESITE = { Strict = true, Lax = true, None = true }

local function fail(path, problem)
  error({ message = path .. ": " .. problem }, 0)
end

local function absent(value, deps)
  return value == nil or value == deps.null
end

local function is_array(value)
  if type(value) ~= "table" then
    return false
  end
  local n = 0
  for _ in pairs(value) do
    n = n + 1
  end
  for i = 1, n do
    if value[i] == nil then
      return false
    end
  end
  return true
end

local function is_integer(value)
  return type(value) == "number" and value == math.floor(value) and value > -2^53 and value < 2^53
end

local function is_string(value)
  return type(value) == "string"
end

local function is_boolean(value)
  return type(value) == "boolean"
end

local function is_object(value)
  return type(value) == "table" and (next(value) == nil or not is_array(value))
end

local function is_integer_in(value, min, max)
  return is_integer(value) and value >= min and value <= max
end

-- The readers of one field: `obj[field]` in its JSON type, or nil when the
-- field is absent or null; any other value fails naming the field.
local function optional(obj, field, path, deps, ok, problem, min, max)
  local value = obj[field]
  if absent(value, deps) then
    return nil
  end
  if not ok(value, min, max) then
    fail(path .. "." .. field, problem or "must be an integer in [" .. min .. ", " .. max .. "]")
  end
  return value
end

local function opt_string(obj, field, path, deps)
  return optional(obj, field, path, deps, is_string, "must be a string")
end

local function opt_integer(obj, field, path, deps, min, max)
  return optional(obj, field, path, deps, is_integer_in, nil, min, max)
end

local function opt_boolean(obj, field, path, deps)
  return optional(obj, field, path, deps, is_boolean, "must be a boolean")
end

local function opt_object(obj, field, path, deps)
  return optional(obj, field, path, deps, is_object, "must be an object")
end

-- An absent array reads as empty.
local function opt_array(obj, field, path, deps)
  return optional(obj, field, path, deps, is_array, "must be an array") or {}
end

-- An optional object field checked by `check(value, path .. "." .. field, deps, ...)`.
local function opt_section(obj, field, path, deps, check, ...)
  local value = opt_object(obj, field, path, deps)
  if value == nil then
    return nil
  end
  return check(value, path .. "." .. field, deps, ...)
end

local function required(obj, field, path, deps, read, ...)
  local value = read(obj, field, path, deps, ...)
  if value == nil then
    fail(path .. "." .. field, "missing")
  end
  return value
end

-- Reads the fields of a record as `rows` list them, in that order (so the
-- first problem found is always the same): `{field, reader, a, b}` calls
-- `reader(value, field, path, deps, a, b)`; `need = true` fails a missing
-- field, `default` stands in for one.
local function record(value, path, deps, rows)
  local out = {}
  for i = 1, #rows do
    local row = rows[i]
    local field = row[1]
    local v = row[2](value, field, path, deps, row[3], row[4])
    if v == nil then
      if row.need then
        fail(path .. "." .. field, "missing")
      end
      v = row.default
    end
    out[field] = v
  end
  return out
end

-- Characters allowed in names that end up in shared-dict keys, log lines and
-- `$proxy_upstream_name`: the shape of "namespace-service-port".
local NAME = "^[%w][%w%._%-]*$"
-- HTTP token (RFC 9110) for header and cookie names.
local TOKEN = "^[%w!#%$%%&'%*%+%-%.%^_`|~]+$"
-- An address is an IPv4/IPv6 literal or a DNS name; no spaces, no slashes.
local ADDRESS = "^[%w%.:%-%%]+$"
-- Cookie values and paths must not contain ';', ',', spaces or controls.
local COOKIE_PATH = "^/[%w%-%._~!%$&'%(%)%*%+=:@/%%]*$"
-- `upstream_hash_by`: nginx variables and plain separators.
local HASH_BY = "^[%w%$_%-%.:/]+$"
local HOSTNAME = "^[%w%-%.]+$"

-- A host name or "*.<domain>" (a server name, an SNI name).
local function is_host_pattern(name)
  return type(name) == "string" and (name:match("^%*%.(.+)$") or name):match(HOSTNAME) ~= nil
end

-- Fails unless `obj[field]` is nil, "" or matches `pattern`.
local function check_match(obj, field, path, pattern, problem)
  local value = obj[field]
  if value ~= nil and value ~= "" and not value:match(pattern) then
    fail(path .. "." .. field, problem)
  end
end

local function check_endpoint(value, path, deps)
  if type(value) ~= "table" then
    fail(path, "must be an object")
  end
  local address = value.address
  if type(address) ~= "string" or not address:match(ADDRESS) then
    fail(path .. ".address", "must be an IP address or host name")
  end
  local port = value.port
  if not is_integer(port) or port < 1 or port > 65535 then
    fail(path .. ".port", "must be an integer in [1, 65535]")
  end
  return { address = address, port = port }
end

local COOKIE_FIELDS = {
  { "name", opt_string },
  { "path", opt_string },
  { "samesite", opt_string },
  { "max_age", opt_integer, 0, 2^31 - 1 },
  { "secure", opt_boolean },
  { "domain", opt_string },
  { "expires", opt_integer, 1, 2^31 - 1 },
  { "conditional_samesite_none", opt_boolean },
}

local function check_affinity(value, path, deps)
  local kind = opt_string(value, "type", path, deps)
  if kind == nil or kind == "" then
    return nil
  end
  if kind ~= "cookie" then
    fail(path .. ".type", "must be \"cookie\" or empty")
  end
  local mode = opt_string(value, "mode", path, deps) or "balanced"
  if mode == "" then
    mode = "balanced"
  end
  if not M.AFFINITY_MODES[mode] then
    fail(path .. ".mode", "must be \"balanced\" or \"persistent\"")
  end
  local c = opt_object(value, "cookie", path, deps) or {}
  local cpath = path .. ".cookie"
  local cookie = record(c, cpath, deps, COOKIE_FIELDS)
  if cookie.domain ~= nil and (#cookie.domain > 253 or not cookie.domain:match("^%.?[%w][%w%.%-]*$")) then
    fail(cpath .. ".domain", "must be a domain name")
  end
  local canary_behavior = opt_string(value, "canary_behavior", path, deps) or "sticky"
  if canary_behavior ~= "sticky" and canary_behavior ~= "legacy" then
    fail(path .. ".canary_behavior", "must be \"sticky\" or \"legacy\"")
  end
  check_match(cookie, "name", cpath, TOKEN, "must be an HTTP token")
  check_match(cookie, "path", cpath, COOKIE_PATH, "must be an absolute path without ';', ',' or spaces")
  if cookie.samesite ~= nil and cookie.samesite ~= "" and not M.SAMESITE[cookie.samesite] then
    fail(cpath .. ".samesite", "must be Strict, Lax or None")
  end
  return { type = "cookie", mode = mode, cookie = cookie, canary_behavior = canary_behavior,
           change_on_failure = opt_boolean(value, "change_on_failure", path, deps) == true }
end

local SHAPING_FIELDS = {
  { "weight", opt_integer, 0, 2^31 - 1, default = 0 },
  { "weight_total", opt_integer, 0, 2^31 - 1, default = 0 },
  { "header", opt_string },
  { "header_value", opt_string },
  { "header_pattern", opt_string },
  { "cookie", opt_string },
}

local function check_policy(value, path, deps)
  local policy = record(value, path, deps, SHAPING_FIELDS)
  if policy.weight_total == 0 then
    policy.weight_total = 100
  end
  if policy.weight > policy.weight_total then
    fail(path .. ".weight", "must not exceed weight_total")
  end
  check_match(policy, "header", path, TOKEN, "must be an HTTP token")
  check_match(policy, "cookie", path, TOKEN, "must be an HTTP token")
  if policy.header_pattern ~= nil and policy.header_pattern ~= "" then
    local ok, err = deps.regex_ok(policy.header_pattern)
    if not ok then
      fail(path .. ".header_pattern", "does not compile: " .. tostring(err))
    end
  end
  return policy
end

local function check_backend(value, path, deps)
  if type(value) ~= "table" or is_array(value) and next(value) ~= nil then
    fail(path, "must be an object")
  end
  local name = value.name
  if type(name) ~= "string" or not name:match(NAME) then
    fail(path .. ".name", "must be a non-empty name of letters, digits, '.', '_' and '-'")
  end
  path = path .. "(" .. name .. ")"
  local endpoints = {}
  for i, endpoint in ipairs(opt_array(value, "endpoints", path, deps)) do
    endpoints[i] = check_endpoint(endpoint, path .. ".endpoints[" .. i .. "]", deps)
  end
  local backend = {
    name = name,
    endpoints = endpoints,
    load_balance = opt_string(value, "load_balance", path, deps),
    upstream_hash_by = opt_string(value, "upstream_hash_by", path, deps),
    upstream_hash_by_subset_size = opt_integer(value, "upstream_hash_by_subset_size", path, deps, 1, 1000),
    session_affinity = opt_section(value, "session_affinity", path, deps, check_affinity),
    traffic_shaping_policy = opt_section(value, "traffic_shaping_policy", path, deps, check_policy),
    alternative_backends = {},
  }
  if backend.load_balance == "" then
    backend.load_balance = nil
  end
  if backend.load_balance ~= nil and not M.ALGORITHMS[backend.load_balance] then
    fail(path .. ".load_balance", "unknown algorithm \"" .. backend.load_balance .. "\"")
  end
  if backend.upstream_hash_by == "" then
    backend.upstream_hash_by = nil
  end
  if backend.upstream_hash_by ~= nil and not (backend.upstream_hash_by:match(HASH_BY)
      and backend.upstream_hash_by:find("$", 1, true)) then
    fail(path .. ".upstream_hash_by", "must name at least one nginx variable ($name)")
  end
  for i, alt in ipairs(opt_array(value, "alternative_backends", path, deps)) do
    if type(alt) ~= "string" or not alt:match(NAME) then
      fail(path .. ".alternative_backends[" .. i .. "]", "must be a backend name")
    end
    backend.alternative_backends[i] = alt
  end
  return backend
end

local function protect(fn, ...)
  local ok, result = pcall(fn, ...)
  if ok then
    return result
  end
  if type(result) == "table" and result.message then
    return nil, result.message
  end
  error(result, 0)
end

--- `data`: list of backend objects (see docs/architecture.md).
function M.validate_backends(data, deps)
  return protect(function()
    if not is_array(data) then
      fail("data", "must be an array of backends")
    end
    local out, seen = {}, {}
    for i, value in ipairs(data) do
      local backend = check_backend(value, "data[" .. i .. "]", deps)
      if seen[backend.name] then
        fail("data[" .. i .. "].name", "duplicate backend \"" .. backend.name .. "\"")
      end
      seen[backend.name] = true
      out[i] = backend
    end
    return out
  end)
end

--- A backends delta: `body` is the whole POST body
-- `{"checksum", "base", "upsert": [backend...], "remove": [name...]}`.
-- Returns `{upsert = {normalised backends}, remove = {names}}`. Upserted
-- backends are checked exactly as in a full payload; a name may not be both
-- upserted and removed (the result would depend on the order of applying).
function M.validate_backends_delta(body, deps)
  local upsert, err = M.validate_backends(body.upsert, deps)
  if upsert == nil then
    return nil, "upsert" .. err:sub(5) -- "data[1].x: ..." -> "upsert[1].x: ..."
  end
  return protect(function()
    local remove, upserted = {}, {}
    for _, backend in ipairs(upsert) do
      upserted[backend.name] = true
    end
    local names = body.remove
    if not is_array(names) then
      fail("remove", "must be an array of backend names")
    end
    for i, name in ipairs(names) do
      if type(name) ~= "string" or not name:match(NAME) then
        fail("remove[" .. i .. "]", "must be a backend name")
      end
      if upserted[name] then
        fail("remove[" .. i .. "]", "\"" .. name .. "\" is also upserted")
      end
      remove[i] = name
    end
    return { upsert = upsert, remove = remove }
  end)
end

--- `data`: `{servers = {host = id}, certificates = {id = pem}, default = id|null}`.
function M.validate_certificates(data, deps)
  return protect(function()
    if type(data) ~= "table" or (next(data) ~= nil and is_array(data)) then
      fail("data", "must be an object")
    end
    local certificates = {}
    for id, pem in pairs(opt_object(data, "certificates", "data", deps) or {}) do
      local path = "data.certificates[" .. tostring(id) .. "]"
      if type(id) ~= "string" or not id:match("^[%w][%w%._%-/:]*$") then
        fail(path, "certificate id must be a name")
      end
      if type(pem) ~= "string" then
        fail(path, "must be a PEM string")
      end
      local ok, err = deps.pem_ok(pem)
      if not ok then
        fail(path, tostring(err))
      end
      certificates[id] = pem
    end
    local servers = {}
    for host, id in pairs(opt_object(data, "servers", "data", deps) or {}) do
      local path = "data.servers[" .. tostring(host) .. "]"
      if type(host) ~= "string" then
        fail(path, "must be keyed by host name")
      end
      local bare = host:match("^%*%.(.+)$") or host
      if not bare:match(HOSTNAME) then
        fail(path, "must be a host name or *.<domain>")
      end
      if type(id) ~= "string" or certificates[id] == nil then
        fail(path, "names an unknown certificate")
      end
      servers[host:lower()] = id
    end
    local default = opt_string(data, "default", "data", deps)
    if default == "" then
      default = nil
    end
    if default ~= nil and certificates[default] == nil then
      fail("data.default", "names an unknown certificate")
    end
    return { servers = servers, certificates = certificates, default = default }
  end)
end

-- A literal URL path as the controller validates it (validate._PATH).
local ROUTE_PATH = "^/[%w%._~!&%(%)%*%+,=:@%%/%-]*$"
local REDIRECT_CODES = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
local LANES = {
  ["@platform_proxy_on"] = true, ["@platform_proxy_off"] = true,
  ["@platform_grpc"] = true, ["@platform_grpcs"] = true,
}
local SCHEMES = { http = true, https = true, auto = true } -- auto: the request's (AUTO_HTTP)
-- Redirect and rewrite targets: a path or an http(s) URL, no spaces or
-- quotes (validate.redirect_target / rewrite_target).
local TARGET = "^[^%s\"'\\]+$"

local function is_target(value)
  return #value <= 2048 and value:match(TARGET) ~= nil
end
local POLICY_ID = "^%x+$"

local REDIRECT_FIELDS = {
  { "code", opt_integer, 301, 308, need = true },
  { "target", opt_string, need = true },
}

local function check_redirect(value, path, deps)
  local redirect = record(value, path, deps, REDIRECT_FIELDS)
  if not REDIRECT_CODES[redirect.code] then
    fail(path .. ".code", "must be a redirect status")
  end
  if not is_target(redirect.target) then
    fail(path .. ".target", "must be a path or an http(s) URL")
  end
  -- from-to-www-redirect: the host the request's URI goes to.
  local host = opt_string(value, "host", path, deps)
  if host ~= nil and (#host > 253 or not host:match("^[%w][%w%.%-]*$")) then
    fail(path .. ".host", "must be a host name")
  end
  return redirect
end

local function check_regex(value, path, deps)
  local ok, err = deps.regex_ok(value)
  if not ok then
    fail(path, "invalid regex: " .. tostring(err))
  end
  return value
end

local function string_list(obj, field, path, deps, pattern)
  local out = {}
  for i, item in ipairs(opt_array(obj, field, path, deps)) do
    if type(item) ~= "string" or (pattern and not item:match(pattern)) then
      fail(path .. "." .. field .. "[" .. i .. "]", "must be a string")
    end
    out[i] = item
  end
  return out
end

local CORS_FIELDS = {
  { "origin_regex", opt_string },
  { "methods", opt_string, need = true },
  { "headers", opt_string, need = true },
  { "expose", opt_string },
  { "credentials", opt_boolean, need = true },
  { "max_age", opt_integer, 0, 2^31, need = true },
}

local function check_cors(value, path, deps)
  local cors = record(value, path, deps, CORS_FIELDS)
  if cors.origin_regex ~= nil then
    check_regex(cors.origin_regex, path .. ".origin_regex", deps)
  end
  return cors
end

local function check_addresses(obj, field, path, deps)
  local list = string_list(obj, field, path, deps, "^[%x%.:/]+$")
  local compile = deps.cidr_ok
  for i, item in ipairs(list) do
    if compile ~= nil then
      local ok, err = compile(item)
      if not ok then
        fail(path .. "." .. field .. "[" .. i .. "]", tostring(err))
      end
    end
  end
  return list
end

local REQUEST_REDIRECT_FIELDS = {
  { "code", opt_integer, 301, 308, need = true },
  { "scheme", opt_string, need = true },
  { "hostname", opt_string },
  { "port", opt_string, need = true },
  { "path", opt_string },
  { "prefix_length", opt_integer, 0, 1024 },
}

-- A Gateway API RequestRedirect (platformd.ingress.bound.redirect_payload).
local function check_request_redirect(value, path, deps)
  local r = record(value, path, deps, REQUEST_REDIRECT_FIELDS)
  if not REDIRECT_CODES[r.code] then
    fail(path .. ".code", "must be a redirect status")
  end
  if not SCHEMES[r.scheme] then
    fail(path .. ".scheme", "must be \"http\" or \"https\"")
  end
  if r.hostname ~= nil and (#r.hostname > 253 or not r.hostname:match(HOSTNAME)) then
    fail(path .. ".hostname", "must be a host name")
  end
  if r.port ~= "" and not r.port:match("^:%d%d?%d?%d?%d?$") then
    fail(path .. ".port", "must be \"\" or \":<port>\"")
  end
  if r.path ~= nil and #r.path > 0 and (#r.path > 1024 or not r.path:match(ROUTE_PATH)) then
    fail(path .. ".path", "must be a URL path")
  end
  if r.path == nil and r.prefix_length ~= nil then
    fail(path .. ".path", "a prefix replacement needs a path")
  end
  return r
end

local POLICY_FIELDS = {
  { "fast", opt_boolean, need = true },
  { "lane", opt_string, need = true },
  { "scheme", opt_string, need = true },
  { "body_size", opt_integer, 0, 2^53, need = true },
  { "upstream_vhost", opt_string, need = true },
  { "ssl_redirect", opt_boolean, need = true },
  { "redirect", opt_section, check_redirect },
  { "rewrite_target", opt_string },
  { "cors", opt_section, check_cors },
  { "allow", check_addresses },
  { "deny", check_addresses },
  { "limit_rps", opt_integer, 0, 1e9, need = true },
  { "limit_burst", opt_integer, 0, 1e12, need = true },
  { "limit_connections", opt_integer, 0, 1e9, need = true },
  { "request_redirect", opt_section, check_request_redirect },
  { "limit_rpm", opt_integer, 0, 6e10, default = 0 },
  { "limit_rpm_burst", opt_integer, 0, 1e14, default = 0 },
  { "limit_allow", check_addresses },
}

-- `list`: an array of exactly `n` integers in [min, max].
local function check_integers(list, path, n, min, max, problem, item_problem)
  if not is_array(list) or #list ~= n then
    fail(path, problem)
  end
  for i = 1, n do
    if not is_integer_in(list[i], min, max) then
      fail(path .. "[" .. i .. "]", item_problem)
    end
  end
  return list
end

local check_binds
local function check_route_policy(value, path, deps)
  if type(value) ~= "table" then
    fail(path, "must be an object")
  end
  local policy = record(value, path, deps, POLICY_FIELDS)
  require("traffic").check(value.traffic, path .. ".traffic", fail, deps.null)
  if not absent(value.limit_status, deps) then
    check_integers(value.limit_status, path .. ".limit_status", 2, 400, 599,
      "must be [requests, connections]", "must be a status from 400 to 599")
  end
  -- A generated lane (platform/ingress/lanes.py) is named by a digest; the
  -- data plane pushes routes naming one only once nginx runs it.
  if not LANES[policy.lane] and not (type(policy.lane) == "string"
      and policy.lane:find("^@platform_lane_%x+$") and #policy.lane == 31) then
    fail(path .. ".lane", "must be one of the template's lanes")
  end
  if not SCHEMES[policy.scheme] then
    fail(path .. ".scheme", "must be \"http\", \"https\" or \"auto\"")
  end
  if policy.upstream_vhost ~= "" and not policy.upstream_vhost:match("^[%w%.%-]+:?%d*$") then
    fail(path .. ".upstream_vhost", "must be a host name with an optional port")
  end
  if policy.rewrite_target ~= nil and not is_target(policy.rewrite_target) then
    fail(path .. ".rewrite_target", "must be a path or an http(s) URL")
  end
  local timeouts = check_integers(opt_array(value, "timeouts", path, deps), path .. ".timeouts", 3, 1, 86400,
    "must be [connect, send, read]", "must be seconds in [1, 86400]")
  policy.timeouts = { timeouts[1], timeouts[2], timeouts[3] }
  if not absent(value.auth, deps) then -- lua/auth.lua checks its own entry
    local problem = require("auth").validate(value.auth, deps.null)
    if problem ~= nil then
      fail(path .. ".auth", problem)
    end
  end
  for _, part in ipairs({ "headers", "mirror", "deadline" }) do -- checked by their own modules
    local ok, err = require(part).check(value[part], path .. "." .. part)
    if not ok then
      fail(path .. "." .. part, err)
    end
  end
  return policy
end

local check_route

-- Gateway API (platformd.ingress.route_choice): `when` = {headers, query:
-- [[name, value, regex]], method}, `split` = [[backend | null, weight]],
-- `next` = the path's next candidate (only after a route with `when`).
local function check_match_list(when, field, path, deps)
  for i, item in ipairs(opt_array(when, field, path, deps)) do
    local where = path .. "." .. field .. "[" .. i .. "]"
    if type(item) ~= "table" or type(item[1]) ~= "string" or type(item[2]) ~= "string"
        or type(item[3]) ~= "boolean" or item[1] == "" or #item[1] > 256 or #item[2] > 4096 then
      fail(where, "must be [name, value, regex]")
    end
    if field == "headers" and not item[1]:match("^[%w_%-]+$") then
      fail(where, "must name a header")
    end
    if item[3] then
      check_regex(item[2], where, deps)
    end
  end
end

local function check_choice(route, value, path, deps, policies)
  local when = opt_object(value, "when", path, deps)
  if when ~= nil then
    check_match_list(when, "headers", path .. ".when", deps)
    check_match_list(when, "query", path .. ".when", deps)
    local method = opt_string(when, "method", path .. ".when", deps)
    if method ~= nil and not method:match("^[A-Z]+$") then
      fail(path .. ".when.method", "must be an HTTP method")
    end
  end
  local split = value.split ~= nil and opt_array(value, "split", path, deps) or nil
  if split ~= nil then
    if split[1] == nil then
      fail(path .. ".split", "must not be empty")
    end
    for i, item in ipairs(split) do
      local name = type(item) == "table" and item[1]
      if name == deps.null then
        name = nil
      end
      if type(item) ~= "table" or (name ~= nil and (type(name) ~= "string" or not name:match(NAME)))
          or not is_integer(item[2]) or item[2] < 1 or item[2] > 1e6 then
        fail(path .. ".split[" .. i .. "]", "must be [backend name | null, weight in 1..1000000]")
      end
    end
  end
  if value.next ~= nil then
    if when == nil then
      fail(path .. ".next", "only a route with conditions has a next candidate")
    end
    route.next = check_route(value.next, path .. ".next", deps, policies)
  end
  route.when, route.split = when, split
end

local ROUTE_FIELDS = {
  { "backend", opt_string },
  { "policy", opt_string, need = true },
  { "rewrite", opt_string },
  { "zone", opt_string },
}

function check_route(value, path, deps, policies)
  if type(value) ~= "table" then
    fail(path, "must be an object")
  end
  local route = record(value, path, deps, ROUTE_FIELDS)
  local policy = policies[route.policy]
  if policy == nil then
    fail(path .. ".policy", "names no policy")
  end
  if route.backend ~= nil and not route.backend:match(NAME) then
    fail(path .. ".backend", "must be a backend name")
  end
  if value.when ~= nil or value.split ~= nil or value.next ~= nil then
    check_choice(route, value, path, deps, policies)
  end
  if route.backend == nil and policy.redirect == nil and policy.request_redirect == nil and route.split == nil then
    fail(path .. ".backend", "a route needs a backend or a redirect")
  end
  if route.rewrite ~= nil then
    check_regex(route.rewrite, path .. ".rewrite", deps)
    if policy.rewrite_target == nil then
      fail(path .. ".rewrite", "set without a rewrite_target")
    end
  end
  if (policy.limit_rps > 0 or policy.limit_connections > 0 or policy.limit_rpm > 0) and (route.zone == nil or not route.zone:match("^%x+$")) then
    fail(path .. ".zone", "a limited route needs a zone")
  end
  return route
end

-- Client certificates (platformd.ingress.client_tls): per host what the
-- router checks, and in "routes" what the handshake needs per SNI name.
local CLIENT_TLS_VERIFY = { on = true, optional = true, optional_no_ca = true }
local POLICY_HEX = "^%x+$"

local CLIENT_TLS_FIELDS = {
  { "id", opt_string, need = true },
  { "verify", opt_string, need = true },
  { "error_page", opt_string, need = true },
  { "pass_certificate", opt_boolean, need = true },
  { "match_cn", opt_string, need = true },
}

local function check_host_client_tls(value, path, deps)
  local out = record(value, path, deps, CLIENT_TLS_FIELDS)
  if not out.id:match(POLICY_HEX) then
    fail(path .. ".id", "must be hex")
  end
  if not CLIENT_TLS_VERIFY[out.verify] then
    fail(path .. ".verify", "must be on, optional or optional_no_ca")
  end
  if out.error_page ~= "" and not is_target(out.error_page) then
    fail(path .. ".error_page", "must be a path or an http(s) URL")
  end
  if out.match_cn ~= "" then
    check_regex(out.match_cn, path .. ".match_cn", deps)
  end
  return out
end

-- `value[field]`: an object keyed by hex ids, each entry checked by
-- `check(entry, where, deps)`; `what` names the keys in the error.
local function hex_keyed(value, field, path, deps, what, check)
  local out = {}
  for key, entry in pairs(required(value, field, path, deps, opt_object)) do
    local where = path .. "." .. field .. "[" .. tostring(key) .. "]"
    if type(key) ~= "string" or not key:match(POLICY_HEX) then
      fail(where, "must be keyed by hex " .. what)
    end
    if type(entry) ~= "table" then
      fail(where, "must be an object")
    end
    out[key] = check(entry, where, deps)
  end
  return out
end

-- `value.names`: SNI host name (or *.<domain>) -> a key of `known`.
local function sni_names(value, path, deps, known, what)
  local names = {}
  for name, key in pairs(required(value, "names", path, deps, opt_object)) do
    if not is_host_pattern(name) or type(key) ~= "string" or known[key] == nil then
      fail(path .. ".names[" .. tostring(name) .. "]", "must map a host name to " .. what)
    end
    names[name] = key
  end
  return names
end

-- An SNI table (lua/util/sni_table.lua): `value[entries]` keyed by hex
-- `keys`, each checked by `check`, and `value.names` mapping host names to
-- them (`what` says to what, in the error).
local function check_sni_table(value, path, deps, entries, keys, what, check)
  local out = { [entries] = hex_keyed(value, entries, path, deps, keys, check) }
  out.names = sni_names(value, path, deps, out[entries], what)
  return out
end

local function check_ca(ca, where, deps)
  local pem = required(ca, "pem", where, deps, opt_string)
  if not pem:find("-----BEGIN CERTIFICATE-----", 1, true) then
    fail(where .. ".pem", "must be PEM certificates")
  end
  return { pem = pem, depth = required(ca, "depth", where, deps, opt_integer, 1, 100) }
end

local function check_meta_client_tls(data, deps)
  return opt_section(data, "client_tls", "data", deps, check_sni_table, "cas", "ids", "an id of cas", check_ca)
end

local function check_tls_setting(s, where, deps)
  local ciphers = required(s, "ciphers", where, deps, opt_string)
  if ciphers ~= "" and not ciphers:match("^[%w:%+!@%._%-]+$") then
    fail(where .. ".ciphers", "must be an OpenSSL cipher list")
  end
  local prefer = required(s, "prefer", where, deps, opt_string)
  if prefer ~= "" and prefer ~= "on" and prefer ~= "off" then
    fail(where .. ".prefer", "must be on, off or empty")
  end
  return { ciphers = ciphers, prefer = prefer }
end

local function check_meta_host_tls(data, deps)
  return opt_section(data, "host_tls", "data", deps, check_sni_table, "settings", "keys", "a key of settings",
    check_tls_setting)
end

local function check_host(value, path, deps, policies)
  if type(value) ~= "table" then
    fail(path, "must be an object")
  end
  local host = {
    hsts = required(value, "hsts", path, deps, opt_boolean),
    redirect = opt_section(value, "redirect", path, deps, check_redirect),
    client_tls = opt_section(value, "client_tls", path, deps, check_host_client_tls),
    exact = {},
    prefix = {},
    regex = {},
  }
  for _, kind in ipairs({ "exact", "prefix" }) do
    for route_path, route in pairs(opt_object(value, kind, path, deps) or {}) do
      local where = path .. "." .. kind .. "[" .. tostring(route_path) .. "]"
      if type(route_path) ~= "string" or #route_path > 1024 or not route_path:match(ROUTE_PATH) then
        fail(where, "must be keyed by a URL path starting with '/'")
      end
      if kind == "prefix" and route_path ~= "/" and route_path:sub(-1) == "/" then
        fail(where, "a prefix path has no trailing '/' (except \"/\")")
      end
      host[kind][route_path] = check_route(route, where, deps, policies)
    end
  end
  local last = math.huge
  for i, item in ipairs(opt_array(value, "regex", path, deps)) do
    local where = path .. ".regex[" .. i .. "]"
    local route = check_route(item, where, deps, policies)
    route.pattern = check_regex(required(item, "pattern", where, deps, opt_string), where .. ".pattern", deps)
    route.length = required(item, "length", where, deps, opt_integer, 1, 1024)
    if route.length > last then
      fail(where .. ".length", "regex routes must come longest first")
    end
    last = route.length
    host.regex[i] = route
  end
  return host
end

local function check_policies(data, deps, out)
  for id, policy in pairs(required(data, "policies", "data", deps, opt_object)) do
    if type(id) ~= "string" or not id:match(POLICY_ID) then
      fail("data.policies", "must be keyed by hex ids")
    end
    out[id] = check_route_policy(policy, "data.policies[" .. id .. "]", deps)
  end
  return out
end

-- Whether two decoded JSON values are equal (tables by content). Allocates
-- nothing: it runs over every host of a posted shard.
local function same(a, b)
  if a == b then
    return true
  end
  if type(a) ~= "table" or type(b) ~= "table" then
    return false
  end
  for k, v in pairs(a) do
    if not same(v, b[k]) then
      return false
    end
  end
  for k in pairs(b) do
    if a[k] == nil then
      return false
    end
  end
  return true
end

-- `known` (optional): hosts checked before, with policies the same; a host
-- equal to its namesake there is taken as it is (see validate_routes_shard).
local function check_hosts(data, deps, policies, out, within, known)
  within = within or "data"
  for name, host in pairs(required(data, "hosts", within, deps, opt_object)) do
    if known ~= nil and same(host, known[name]) then
      out[name] = host
    else
      local path = within .. ".hosts[" .. tostring(name) .. "]"
      if type(name) ~= "string" then
        fail(path, "must be keyed by host name")
      end
      local bare = name:match("^%*%.(.+)$") or name
      if #name > 253 or not bare:match(HOSTNAME) or name ~= name:lower() then
        fail(path, "must be a lower-case host name or *.<domain>")
      end
      out[name] = check_host(host, path, deps, policies)
    end
  end
  return out
end

-- The per address / port tables (platformd.ingress.bound): optional.
check_binds = function(data, deps, policies)
  local binds = {}
  for i, item in ipairs(opt_array(data, "binds", "data", deps)) do
    local where = "data.binds[" .. i .. "]"
    if type(item) ~= "table" then
      fail(where, "must be an object")
    end
    local address = opt_string(item, "address", where, deps)
    if address ~= nil and not address:match("^[%x%.:]+$") then
      fail(where .. ".address", "must be an IP address")
    end
    local bind = {
      address = address,
      port = required(item, "port", where, deps, opt_integer, 1, 65535),
      fallback = required(item, "fallback", where, deps, opt_boolean),
      hosts = check_hosts(item, deps, policies, {}, where),
    }
    local default = opt_object(item, "default", where, deps)
    if default ~= nil then
      bind.default = check_host(default, where .. ".default", deps, policies)
    end
    binds[i] = bind
  end
  return binds
end

-- What the "routes" section and the whole-table form share: the policies,
-- the HSTS value, the ssl-redirect settings and the catch-all host.
local function check_meta(data, deps)
  if type(data) ~= "table" then
    fail("data", "must be an object")
  end
  local redirect = required(data, "ssl_redirect", "data", deps, opt_object)
  local out = {
    policies = check_policies(data, deps, {}),
    hsts = required(data, "hsts", "data", deps, opt_string),
    ssl_redirect = {
      code = required(redirect, "code", "data.ssl_redirect", deps, opt_integer, 301, 308),
      port = required(redirect, "port", "data.ssl_redirect", deps, opt_integer, 1, 65535),
    },
  }
  if not REDIRECT_CODES[out.ssl_redirect.code] or out.ssl_redirect.code == 303 then
    fail("data.ssl_redirect.code", "must be 301, 302, 307 or 308")
  end
  out.default = check_host(required(data, "default", "data", deps, opt_object), "data.default", deps, out.policies)
  out.binds = check_binds(data, deps, out.policies)
  if not absent(data.wildcards, deps) then -- Gateway wildcards, more labels (lua/wildcards.lua)
    out.wildcards = check_hosts({ hosts = data.wildcards }, deps, out.policies, {}, "data.wildcards")
    for name in pairs(out.wildcards) do
      if not name:match("^%*%.") then
        fail("data.wildcards.hosts[" .. name .. "]", "must be a wildcard *.<domain>")
      end
    end
  end
  out.client_tls = check_meta_client_tls(data, deps)
  out.host_tls = check_meta_host_tls(data, deps)
  return out
end

--- `data` of section "routes": what is not per host (the catch-all, the
-- HSTS value, the ssl-redirect settings) and how many shards the hosts are in.
function M.validate_routes_meta(data, deps)
  return protect(function()
    local out = check_meta(data, deps)
    out.shards = required(data, "shards", "data", deps, opt_integer, 1, 4096)
    return out
  end)
end

--- `data` of a section "routes_<n>": the hosts of one shard with the policies they use.
-- `previous` (optional): {hosts, policies} of a version of this shard that
-- passed here before, as decoded. While each of its policies is in `data`
-- unchanged (a host's check reads the policies it names), a host equal to
-- its namesake there is not checked again and comes out as posted: a route
-- change touches a host or two of a shard's ~40 at 10,000 Ingresses, and
-- checking all of them was most of the garbage a POST left (a copy of every
-- host and a path string per route: ~75 KB per shard) and of its time.
function M.validate_routes_shard(data, deps, previous)
  return protect(function()
    if type(data) ~= "table" then
      fail("data", "must be an object")
    end
    local policies = check_policies(data, deps, {})
    local known = previous and previous.hosts
    if known ~= nil then
      for id, policy in pairs(previous.policies or {}) do
        if not same(policy, data.policies[id]) then
          known = nil
          break
        end
      end
    end
    return { policies = policies, hosts = check_hosts(data, deps, policies, {}, nil, known) }
  end)
end

--- `data`: the route table in one (platformd.ingress.routes;
-- docs/architecture.md): the "routes" checks plus every host, as one shard.
-- Strict: every field the router reads is checked, so it never guesses.
-- For specs and tools; nginx stores the table as shards.
function M.validate_routes(data, deps)
  return protect(function()
    local out = check_meta(data, deps)
    out.hosts = check_hosts(data, deps, out.policies, {})
    return out
  end)
end

return M
