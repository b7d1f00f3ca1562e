local router = require("router")
local schema = require("util.schema")

local deps = require("helpers").schema_deps()
local NULL = deps.null

-- Lua patterns stand in for PCRE here: the specs use the common subset.
router.regex_find = function(subject, pattern, options)
  assert(options == "ijo")
  return subject:lower():find(pattern:lower())
end

local POLICY = {
  fast = true, lane = "@platform_proxy_off", scheme = "http", body_size = 1048576, timeouts = { 5, 60, 60 },
  upstream_vhost = "", ssl_redirect = false, redirect = NULL, rewrite_target = NULL, cors = NULL,
  allow = {}, deny = {}, limit_rps = 0, limit_burst = 0, limit_connections = 0,
}

local function route(backend)
  return { backend = backend, policy = "aa", rewrite = NULL, zone = NULL }
end

local function regex(pattern, backend)
  local r = route(backend)
  r.pattern = pattern
  r.length = #pattern
  return r
end

local function host(exact, prefix, regexes, extra)
  local h = { hsts = false, redirect = NULL, exact = exact or {}, prefix = prefix or {}, regex = regexes or {} }
  for k, v in pairs(extra or {}) do
    h[k] = v
  end
  return h
end

-- Compiles through the schema, as the endpoint stores it.
local function compile(hosts, default)
  local data, err = schema.validate_routes({
    hosts = hosts, default = default or host(), policies = { aa = POLICY },
    hsts = "max-age=1", ssl_redirect = { code = 308, port = 443 },
  }, deps)
  assert.is_not_nil(data, err)
  return router.compile(data)
end

local function backend_for(compiled, name, uri)
  local location = router.match(router.find(compiled, name), uri)
  return location and location.backend or "404"
end

describe("router matching", function()
  local routes = compile({
    ["app.example.com"] = host(
      { ["/foo/bar"] = route("foobar-exact"), ["/exact"] = route("exact"), ["/slash/"] = route("slash-exact") },
      { ["/"] = route("root"), ["/foo"] = route("foo"), ["/foo/bar"] = route("foobar"), ["/Case"] = route("case") }),
    ["noroot.example.com"] = host({}, { ["/api"] = route("api") }),
    ["*.wild.example.com"] = host({}, { ["/"] = route("wild") }),
    ["x.wild.example.com"] = host({}, { ["/"] = route("exact-host") }),
    ["regex.example.com"] = host({}, { ["/"] = route("root"), ["/v1"] = route("prefix-v1"),
                                        ["/v1/admin/panel"] = route("long-prefix") },
      { regex("^/v1/admin", "regex-admin"), regex("^/v[0-9]", "regex-short") }),
  }, host({}, { ["/hostless"] = route("hostless"), ["/"] = route("default") }))

  it("takes Exact before any Prefix", function()
    assert.are.equal("foobar-exact", backend_for(routes, "app.example.com", "/foo/bar"))
    assert.are.equal("exact", backend_for(routes, "app.example.com", "/exact"))
    assert.are.equal("root", backend_for(routes, "app.example.com", "/exact/more"))
  end)

  it("matches Prefix element-wise and takes the longest", function()
    assert.are.equal("foo", backend_for(routes, "app.example.com", "/foo"))
    assert.are.equal("foo", backend_for(routes, "app.example.com", "/foo/"))
    assert.are.equal("foo", backend_for(routes, "app.example.com", "/foo/baz"))
    assert.are.equal("foobar", backend_for(routes, "app.example.com", "/foo/bar/baz"))
    assert.are.equal("root", backend_for(routes, "app.example.com", "/foobar"))
  end)

  it("never matches an Exact /slash/ for /slash (no 301 either)", function()
    assert.are.equal("slash-exact", backend_for(routes, "app.example.com", "/slash/"))
    assert.are.equal("root", backend_for(routes, "app.example.com", "/slash"))
  end)

  it("compares paths case-sensitively", function()
    assert.are.equal("case", backend_for(routes, "app.example.com", "/Case/x"))
    assert.are.equal("root", backend_for(routes, "app.example.com", "/case/x"))
  end)

  it("answers 404 on a host without Prefix /", function()
    assert.are.equal("api", backend_for(routes, "noroot.example.com", "/api/x"))
    assert.are.equal("404", backend_for(routes, "noroot.example.com", "/"))
    assert.are.equal("404", backend_for(routes, "noroot.example.com", "/apix"))
  end)

  it("finds exact hosts, then one-label wildcards, then the catch-all", function()
    assert.are.equal("exact-host", backend_for(routes, "x.wild.example.com", "/"))
    assert.are.equal("wild", backend_for(routes, "y.wild.example.com", "/"))
    assert.are.equal("default", backend_for(routes, "a.y.wild.example.com", "/"))
    assert.are.equal("default", backend_for(routes, "wild.example.com", "/"))
    assert.are.equal("hostless", backend_for(routes, "unknown.example.com", "/hostless/x"))
    assert.are.equal("default", backend_for(routes, nil, "/"))
  end)

  it("tries regexes longest first, only over shorter prefixes; a prefix wins a tie", function()
    assert.are.equal("regex-admin", backend_for(routes, "regex.example.com", "/v1/admin"))
    assert.are.equal("long-prefix", backend_for(routes, "regex.example.com", "/v1/admin/panel/x"))
    assert.are.equal("regex-short", backend_for(routes, "regex.example.com", "/v2/x"))
    -- "^/v[0-9]" (8) is longer than Prefix /v1 (3): the regex wins.
    assert.are.equal("regex-short", backend_for(routes, "regex.example.com", "/v1/x"))
    assert.are.equal("root", backend_for(routes, "regex.example.com", "/other"))
    assert.are.equal("regex-admin", backend_for(routes, "regex.example.com", "/V1/ADMIN"))
  end)

  it("looks up at most one key per URI segment, however many paths a host has", function()
    local prefix = {}
    for i = 1, 1000 do
      prefix["/p" .. i] = route("p" .. i)
    end
    local big = compile({ ["big.example.com"] = host({}, prefix) })
    local entry = router.find(big, "big.example.com")
    local lookups = 0
    local raw = entry.prefix
    entry.prefix = setmetatable({}, { __index = function(_, k) lookups = lookups + 1 return rawget(raw, k) end })
    assert.are.equal("p500", router.match(entry, "/p500/a/b").backend)
    assert.is_true(lookups <= 3)
  end)
end)

describe("router.compile", function()
  it("keeps each route's policy and the global redirect settings", function()
    local compiled = compile({ ["a.com"] = host({}, { ["/"] = route("a") }, {}, { hsts = true }) })
    local entry = router.find(compiled, "a.com")
    assert.is_true(entry.hsts)
    assert.are.equal("max-age=1", compiled.hsts)
    assert.are.equal(308, compiled.ssl_code)
    assert.are.equal("", compiled.port_suffix)
    assert.are.equal("@platform_proxy_off", entry.root.policy.lane)
    assert.same({ 5, 60, 60 }, entry.root.policy.timeouts)
  end)

  it("splits a rewrite target into literals and captures", function()
    local p = {}
    for k, v in pairs(POLICY) do
      p[k] = v
    end
    p.rewrite_target = "/x/$2?a=$1"
    local data = assert(schema.validate_routes({
      hosts = { ["a.com"] = host({}, { ["/"] = { backend = "a", policy = "bb", rewrite = "^/", zone = NULL } }) },
      default = host(), policies = { bb = p }, hsts = "", ssl_redirect = { code = 301, port = 8443 },
    }, deps))
    local compiled = router.compile(data)
    local policy = router.find(compiled, "a.com").root.policy
    assert.same({ "/x/", 2, "?a=", 1, "" }, policy.rewrite_parts)
    assert.is_true(policy.rewrite_query)
    assert.are.equal(":8443", compiled.port_suffix)
  end)
end)

describe("router.compile_shard", function()
  it("compiles every shard without hosts to one shared table, and finds nothing there", function()
    local none, empty = router.compile_shard(nil), router.compile_shard({ hosts = {}, policies = {} })
    assert.equals(none, empty) -- 256 shards, most empty at small sizes: no lazy table each
    assert.is_nil(empty.hosts["a.example"])
    local data, err = schema.validate_routes_shard({ hosts = { ["a.example"] = host({}, { ["/"] = route("web") }) },
                                                    policies = { aa = POLICY } }, deps)
    assert.is_not_nil(data, err)
    local one = router.compile_shard(data)
    assert.are_not.equal(empty, one)
    assert.equals("web", one.hosts["a.example"].root.backend)
    assert.is_nil(empty.hosts["a.example"]) -- the shared table stays empty
  end)
end)

describe("util.schema validate_routes", function()
  local function err(mutate)
    local data = {
      hosts = { ["a.com"] = host({}, { ["/"] = route("a") }) }, default = host(),
      policies = { aa = POLICY }, hsts = "", ssl_redirect = { code = 308, port = 443 },
    }
    mutate(data)
    local out, e = schema.validate_routes(data, deps)
    assert.is_nil(out)
    return e
  end

  it("refuses what the router would have to guess", function()
    assert.matches("names no policy", err(function(d) d.hosts["a.com"].prefix["/"].policy = "zz" end))
    assert.matches("trailing", err(function(d) d.hosts["a.com"].prefix["/x/"] = route("a") end))
    assert.matches("host name", err(function(d) d.hosts["A.com"] = host() end))
    assert.matches("lane", err(function(d) d.policies.aa = setmetatable({ lane = "@evil" }, { __index = POLICY }) end))
    assert.matches("longest first", err(function(d)
      d.hosts["a.com"].regex = { regex("^/a", "a"), regex("^/abc", "b") }
    end))
    assert.matches("backend or a redirect", err(function(d) d.hosts["a.com"].prefix["/"].backend = NULL end))
  end)
end)

describe("router: Gateway tables and redirects (lua/bound.lua, lua/redirect.lua)", function()
  local function with(fields)
    local p = {}
    for k, v in pairs(POLICY) do
      p[k] = v
    end
    for k, v in pairs(fields) do
      p[k] = v
    end
    return p
  end
  local REDIRECT = { code = 301, scheme = "https", hostname = NULL, port = ":8443", path = "/x", prefix_length = 2 }

  local function validate(binds, policy)
    return schema.validate_routes({
      hosts = { ["a.com"] = host({}, { ["/"] = route("ingress") }) }, default = host(),
      policies = { aa = POLICY, bb = policy or with({ request_redirect = REDIRECT }) }, hsts = "",
      ssl_redirect = { code = 308, port = 443 }, binds = binds,
    }, deps)
  end

  it("compiles the tables and a redirect route, which is never the fast path", function()
    local redirect_route = { backend = NULL, policy = "bb", rewrite = NULL, zone = NULL }
    local data = assert(validate({
      { address = "10.0.0.1", port = 80, fallback = true, hosts = { ["*.a.com"] = host({}, { ["/"] = route("gw") }) },
        default = host({}, { ["/"] = redirect_route }) },
    }))
    local compiled = router.compile(data)
    assert.is_true(compiled.binds.addressed)
    local t = compiled.binds.by_address["10.0.0.1"]["80"]
    assert.are.equal("gw", t.hosts["*.a.com"].root.backend)
    local policy = t.default.root.policy
    assert.is_false(policy.proxy)
    assert.is_false(policy.simple)
    assert.same({ code = 301, origin = "https://", port = ":8443", path = "/x", prefix_length = 2 },
      policy.request_redirect)
  end)

  it("finds hosts by specificity across the Gateway table of the local address and the Ingress table", function()
    local data = assert(validate({
      { address = "10.0.0.1", port = 80, fallback = true,
        hosts = { ["*.a.com"] = host({}, { ["/"] = route("gw-wild") }) }, default = host({}, { ["/"] = route("gw-any") }) },
    }))
    local compiled = router.compile(data)
    local saved = _G.ngx
    _G.ngx = { var = { server_addr = "10.0.0.1", server_port = "80" } }
    finally(function()
      _G.ngx = saved
    end)
    assert.are.equal("gw-wild", router.find(compiled, "x.y.a.com").root.backend) -- one or more labels
    assert.are.equal("ingress", router.find(compiled, "a.com").root.backend) -- an exact Ingress name beats "*"
    assert.are.equal("gw-any", router.find(compiled, "other.com").root.backend) -- before the Ingress catch-all
    _G.ngx.var.server_addr = "10.0.0.9"
    assert.are.equal(compiled.default, router.find(compiled, "other.com")) -- not the Gateway's address
  end)

  it("has no tables without binds: the Ingress path does no extra work", function()
    assert.is_nil(router.compile(assert(validate(nil))).binds)
    assert.is_nil(router.compile(assert(validate({}))).binds)
  end)

  it("refuses malformed tables and redirects", function()
    local function refused(binds, policy, fragment)
      local out, e = validate(binds, policy)
      assert.is_nil(out)
      assert.matches(fragment, e)
    end
    refused({ { address = "a b", port = 80, fallback = true, hosts = {} } }, nil, "IP address")
    refused({ { port = 0, fallback = true, hosts = {} } }, nil, "port")
    refused({ { port = 80, hosts = {} } }, nil, "fallback")
    refused({ { port = 80, fallback = true, hosts = { ["A b"] = host() } } }, nil, "host name")
    local bad = {}
    for k, v in pairs(REDIRECT) do
      bad[k] = v
    end
    bad.port = ":80\r\nX: y"
    refused(nil, with({ request_redirect = bad }), "port")
    bad.port, bad.hostname = "", "evil.com/x"
    refused(nil, with({ request_redirect = bad }), "host name")
    bad.hostname, bad.scheme = NULL, "javascript"
    refused(nil, with({ request_redirect = bad }), "scheme")
  end)
end)
