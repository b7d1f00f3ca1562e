local schema = require("util.schema")

local deps = require("helpers").schema_deps()
local NULL = deps.null

local function backend(fields)
  local b = { name = "ns-svc-80", endpoints = { { address = "10.1.0.5", port = 8080 } } }
  for k, v in pairs(fields or {}) do b[k] = v end
  return b
end

local function rejects(data, fragment)
  local out, err = schema.validate_backends(data, deps)
  assert.is_nil(out)
  assert.is_truthy(err:find(fragment, 1, true), err)
end

describe("util.schema backends", function()
  it("accepts the documented payload and normalises it", function()
    local out = assert(schema.validate_backends({ backend({
      load_balance = "ewma",
      upstream_hash_by = NULL,
      session_affinity = { type = "cookie", mode = "persistent", cookie = { name = "route", max_age = 3600, path = "/", samesite = "Lax", secure = false } },
      alternative_backends = { "ns-canary-80" },
      traffic_shaping_policy = { weight = 30, weight_total = 100, header = "X-Canary", header_value = "", header_pattern = "", cookie = "canary" },
      unknown_field = 1,
    }) }, deps))
    local b = out[1]
    assert.equals("ewma", b.load_balance)
    assert.is_nil(b.upstream_hash_by)
    assert.equals("persistent", b.session_affinity.mode)
    assert.equals(30, b.traffic_shaping_policy.weight)
    assert.is_nil(b.unknown_field)
  end)

  it("accepts an empty list and empty endpoints", function()
    assert.same({}, schema.validate_backends({}, deps))
    assert.same({}, schema.validate_backends({ backend({ endpoints = {} }) }, deps)[1].endpoints)
  end)

  it("defaults weight_total to 100 and mode to balanced", function()
    local b = schema.validate_backends({ backend({
      traffic_shaping_policy = { weight = 10 },
      session_affinity = { type = "cookie" },
    }) }, deps)[1]
    assert.equals(100, b.traffic_shaping_policy.weight_total)
    assert.equals("balanced", b.session_affinity.mode)
  end)

  it("rejects bad shapes with the path of the problem", function()
    rejects({ name = "x" }, "must be an array")
    rejects({ backend({ name = "" }) }, "data[1].name")
    rejects({ backend({ name = "a b" }) }, "data[1].name")
    rejects({ backend(), backend() }, "duplicate")
    rejects({ backend({ endpoints = { { address = "10.0.0.1", port = "80" } } }) }, "port")
    rejects({ backend({ endpoints = { { address = "10.0.0.1", port = 70000 } } }) }, "port")
    rejects({ backend({ endpoints = { { address = "10.0.0.1", port = 80.5 } } }) }, "port")
    rejects({ backend({ endpoints = { { address = "a b", port = 80 } } }) }, "address")
    rejects({ backend({ load_balance = "random" }) }, "unknown algorithm")
    rejects({ backend({ upstream_hash_by = "request_uri" }) }, "upstream_hash_by")
    rejects({ backend({ upstream_hash_by = "$uri;x" }) }, "upstream_hash_by")
    rejects({ backend({ session_affinity = { type = "ip" } }) }, "session_affinity.type")
    rejects({ backend({ session_affinity = { type = "cookie", mode = "sometimes" } }) }, "mode")
    rejects({ backend({ session_affinity = { type = "cookie", cookie = { name = "a;b" } } }) }, "cookie.name")
    rejects({ backend({ session_affinity = { type = "cookie", cookie = { path = "/a b" } } }) }, "cookie.path")
    rejects({ backend({ session_affinity = { type = "cookie", cookie = { samesite = "lax" } } }) }, "samesite")
    rejects({ backend({ traffic_shaping_policy = { weight = 101 } }) }, "weight")
    rejects({ backend({ traffic_shaping_policy = { weight = -1 } }) }, "weight")
    rejects({ backend({ traffic_shaping_policy = { header = "X Canary" } }) }, "header")
    rejects({ backend({ traffic_shaping_policy = { header_pattern = "(" } }) }, "does not compile")
    rejects({ backend({ alternative_backends = { 5 } }) }, "alternative_backends")
  end)
end)

describe("util.schema certificates", function()
  local pem = "-----BEGIN CERTIFICATE-----..."

  it("accepts hosts, wildcards and a default", function()
    local out = assert(schema.validate_certificates({
      servers = { ["Example.com"] = "a", ["*.example.com"] = "a" },
      certificates = { a = pem },
      default = "a",
    }, deps))
    assert.equals("a", out.servers["example.com"])
    assert.equals("a", out.servers["*.example.com"])
    assert.equals("a", out.default)
  end)

  it("accepts a null default and empty maps", function()
    local out = assert(schema.validate_certificates({ servers = {}, certificates = {}, default = NULL }, deps))
    assert.is_nil(out.default)
  end)

  it("rejects unknown ids, bad hosts and bad PEMs", function()
    local function err(data)
      local out, e = schema.validate_certificates(data, deps)
      assert.is_nil(out)
      return e
    end
    assert.matches("unknown certificate", err({ servers = { ["a.com"] = "x" }, certificates = {} }))
    assert.matches("unknown certificate", err({ certificates = {}, default = "x" }))
    assert.matches("host name", err({ servers = { ["a b"] = "a" }, certificates = { a = pem } }))
    assert.matches("not a PEM", err({ certificates = { a = "junk" } }))
  end)
end)


describe("util.schema records (read by their tables of fields)", function()
  local POLICY = {
    fast = true, lane = "@platform_proxy_off", scheme = "http", body_size = 0, timeouts = { 5, 60, 60 },
    upstream_vhost = "", ssl_redirect = false, limit_rps = 0, limit_burst = 0, limit_connections = 0,
  }
  local function routes(policy)
    local host = { hsts = false, exact = {}, prefix = {}, regex = {} }
    return schema.validate_routes({ hosts = {}, default = host, policies = { aa = policy }, hsts = "",
      ssl_redirect = { code = 308, port = 443 } }, deps)
  end
  local function with(fields)
    local p = {}
    for k, v in pairs(POLICY) do p[k] = v end
    for k, v in pairs(fields) do p[k] = v end
    return p
  end

  it("fills defaults and empty lists for absent or null fields", function()
    local p = assert(routes(with({ limit_rpm = NULL, cors = NULL }))).policies.aa
    assert.equals(0, p.limit_rpm)
    assert.equals(0, p.limit_rpm_burst)
    assert.same({}, p.allow)
    assert.is_nil(p.cors)
    assert.same({ 5, 60, 60 }, p.timeouts)
  end)

  it("names a missing required field, a wrong type and a range", function()
    local _, e = routes(with({ lane = NULL }))
    assert.equals("data.policies[aa].lane: missing", e)
    _, e = routes(with({ fast = "yes" }))
    assert.equals("data.policies[aa].fast: must be a boolean", e)
    _, e = routes(with({ limit_rps = -1 }))
    assert.equals("data.policies[aa].limit_rps: must be an integer in [0, 1000000000]", e)
    _, e = routes(with({ cors = { 1 } }))
    assert.equals("data.policies[aa].cors: must be an object", e)
    _, e = routes(with({ cors = { methods = "GET", headers = "", credentials = false } }))
    assert.equals("data.policies[aa].cors.max_age: missing", e)
  end)

  it("reports the first problem in the order of the fields, whatever the table's order", function()
    local _, e = routes(with({ scheme = 1, fast = 1, limit_burst = -1 }))
    assert.equals("data.policies[aa].fast: must be a boolean", e)
  end)

  it("checks fixed-length integer lists item by item", function()
    local _, e = routes(with({ timeouts = { 5, 60 } }))
    assert.equals("data.policies[aa].timeouts: must be [connect, send, read]", e)
    _, e = routes(with({ timeouts = { 5, 0, 60 } }))
    assert.equals("data.policies[aa].timeouts[2]: must be seconds in [1, 86400]", e)
    _, e = routes(with({ limit_status = { 429, 600 } }))
    assert.equals("data.policies[aa].limit_status[2]: must be a status from 400 to 599", e)
    assert(routes(with({ limit_status = { 429, 503 } })))
  end)
end)

describe("util.schema validate_routes_shard with the version checked before", function()
  local POLICY = {
    fast = true, lane = "@platform_proxy_off", scheme = "http", body_size = 0, timeouts = { 5, 60, 60 },
    upstream_vhost = "", ssl_redirect = false, limit_rps = 0, limit_burst = 0, limit_connections = 0,
  }
  local LIMITED = {}
  for k, v in pairs(POLICY) do LIMITED[k] = v end
  LIMITED.limit_rps = 5

  -- Decoded afresh each time, as a POST is: equal content, other tables.
  local function shard(policy, backend)
    return {
      policies = { aa = policy or POLICY },
      hosts = {
        ["a.example"] = { hsts = false, exact = {}, prefix = { ["/"] = { backend = "ns-a-80", policy = "aa" } },
                          regex = { { pattern = "^/r[0-9]+", length = 9, backend = "ns-a-80", policy = "aa" } } },
        ["b.example"] = { hsts = false, exact = {}, prefix = { ["/"] = { backend = backend or "ns-b-80", policy = "aa" } },
                          regex = {} },
      },
    }
  end

  -- deps whose regex check counts its calls: one per host checked here.
  local function counting()
    local d, calls = {}, { 0 }
    for k, v in pairs(deps) do d[k] = v end
    d.regex_ok = function(pattern)
      calls[1] = calls[1] + 1
      return deps.regex_ok(pattern)
    end
    return d, calls
  end

  it("does not check again a host equal to its namesake, and checks the one that changed", function()
    local d, calls = counting()
    local before = assert(schema.validate_routes_shard(shard(), d))
    assert.equals(1, calls[1])
    local previous = shard()
    local data = shard(nil, "ns-b2-80")
    local out = assert(schema.validate_routes_shard(data, d, previous))
    assert.equals(1, calls[1]) -- a.example, with the regex, taken as it was
    assert.equals(data.hosts["a.example"], out.hosts["a.example"]) -- as posted
    assert.same(before.hosts["b.example"].prefix["/"].policy, out.hosts["b.example"].prefix["/"].policy)
    assert.equals("ns-b2-80", out.hosts["b.example"].prefix["/"].backend) -- b.example checked and copied
    local bad = shard(nil, "not a name!")
    local _, err = schema.validate_routes_shard(bad, d, previous)
    assert.matches("hosts%[b.example%].prefix%[/%].backend: must be a backend name", err)
  end)

  it("checks every host when a policy of the previous version changed or went", function()
    local d, calls = counting()
    -- limited now: a route of this policy needs a zone, which the unchanged hosts lack
    local _, err = schema.validate_routes_shard(shard(LIMITED), d, shard())
    assert.matches("a limited route needs a zone", err)
    local gone = shard()
    gone.policies = { bb = POLICY }
    _, err = schema.validate_routes_shard(gone, d, shard())
    assert.matches("names no policy", err)
    calls[1] = 0
    local grown = shard()
    grown.policies.cc = LIMITED -- a new policy leaves the hosts that do not name it alone
    assert(schema.validate_routes_shard(grown, d, shard()))
    assert.equals(0, calls[1])
  end)
end)
