-- lua/wildcards.lua through the router: Gateway wildcards on the shared table
-- cover one or more labels (listener isolation), Ingress wildcards exactly
-- one, and the extra lookup happens only after a miss.
local router = require("router")
local schema = require("util.schema")

local NULL = setmetatable({}, { __tostring = function() return "null" end })
local deps = { null = NULL, regex_ok = function() return true end }

local POLICY = {
  fast = true, lane = "@platform_proxy_off", scheme = "http", body_size = 1048576, timeouts = { 5, 60, 60 },
  upstream_vhost = "", ssl_redirect = false, redirect = NULL, rewrite_target = NULL, cors = NULL,
  allow = {}, deny = {}, limit_rps = 0, limit_burst = 0, limit_connections = 0,
}

local function host(prefix)
  local p = {}
  for path, backend in pairs(prefix) do
    p[path] = { backend = backend, policy = "aa", rewrite = NULL, zone = NULL }
  end
  return { hsts = false, redirect = NULL, exact = {}, prefix = p, regex = {} }
end

local function compile(wildcards)
  local data, err = schema.validate_routes({
    hosts = {
      -- One name for both APIs: the Ingress's /ingress and the listener's /wildcard-example-com.
      ["*.example.com"] = host({ ["/wildcard-example-com"] = "wild", ["/ingress"] = "ingress-wild" }),
      ["*.foo.example.com"] = host({ ["/wildcard-foo-example-com"] = "foo-wild" }),
      ["abc.foo.example.com"] = host({ ["/abc-foo-example-com"] = "abc" }),
      ["*.ing.example.com"] = host({ ["/"] = "ingress-only" }), -- an Ingress wildcard: one label
    },
    default = host({ ["/empty-hostname"] = "empty" }),
    policies = { aa = POLICY }, hsts = "", ssl_redirect = { code = 308, port = 443 },
    wildcards = wildcards,
  }, deps)
  assert.is_not_nil(data, err)
  return router.compile(data)
end

local GATEWAY = {
  ["*.example.com"] = host({ ["/wildcard-example-com"] = "wild" }), -- the Gateway's own paths
  ["*.foo.example.com"] = host({ ["/wildcard-foo-example-com"] = "foo-wild" }),
}

local function backend(compiled, name, uri)
  local location = router.match(router.find(compiled, name), uri)
  return location and location.backend or "404"
end

describe("Gateway wildcards on the shared table", function()
  local routes = compile(GATEWAY)

  it("isolate listeners: each name reaches only the most specific listener's routes", function()
    local cases = {
      { "bar.com", "/empty-hostname", "empty" }, { "bar.com", "/wildcard-example-com", "404" },
      { "bar.example.com", "/wildcard-example-com", "wild" }, { "bar.example.com", "/empty-hostname", "404" },
      { "bar.foo.example.com", "/wildcard-foo-example-com", "foo-wild" },
      { "bar.foo.example.com", "/wildcard-example-com", "404" },
      { "abc.foo.example.com", "/abc-foo-example-com", "abc" },
      { "abc.foo.example.com", "/wildcard-foo-example-com", "404" },
      -- One or more labels, the longest wildcard first.
      { "a.b.example.com", "/wildcard-example-com", "wild" },
      { "a.b.foo.example.com", "/wildcard-foo-example-com", "foo-wild" },
      { "a.b.foo.example.com", "/wildcard-example-com", "404" },
      { "x.y.z.abc.foo.example.com", "/wildcard-foo-example-com", "foo-wild" },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[3], backend(routes, c[1], c[2]), c[1] .. c[2])
    end
  end)

  it("keeps Ingress wildcards to one label, and the Ingress paths of a shared name too", function()
    assert.are.equal("ingress-only", backend(routes, "x.ing.example.com", "/"))
    -- Two labels under the Ingress wildcard: the Gateway's *.example.com covers it, not the Ingress's.
    assert.are.equal("404", backend(routes, "a.x.ing.example.com", "/"))
    assert.are.equal("wild", backend(routes, "a.x.ing.example.com", "/wildcard-example-com"))
    assert.are.equal("ingress-wild", backend(routes, "x.example.com", "/ingress"))
    assert.are.equal("404", backend(routes, "a.b.example.com", "/ingress"))
  end)

  it("is no work without Gateway wildcards: one label only, as before", function()
    local plain = compile(nil)
    assert.is_nil(plain.wildcards)
    assert.are.equal("wild", backend(plain, "bar.example.com", "/wildcard-example-com"))
    assert.are.equal("404", backend(plain, "a.b.example.com", "/wildcard-example-com"))
    assert.is_nil(compile({}).wildcards)
  end)

  it("refuses names that are not wildcards", function()
    local data = schema.validate_routes({
      hosts = {}, default = host({}), policies = { aa = POLICY }, hsts = "",
      ssl_redirect = { code = 308, port = 443 }, wildcards = { ["a.example.com"] = host({}) },
    }, deps)
    assert.is_nil(data)
  end)
end)
