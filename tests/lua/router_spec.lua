local router = require("router")
local schema = require("util.schema")

local NULL = setmetatable({}, { __tostring = function() return "null" end })
local deps = { null = NULL }

local function loc(path, match, backend, ssl_redirect)
  return { path = path, match = match, backend = backend, ssl_redirect = ssl_redirect or false }
end

local function payload(servers, redirect)
  return { servers = servers, ssl_redirect = redirect or { code = 308, port = 443 } }
end

-- Compiles through the schema, as the endpoint stores it.
local function compile(servers, redirect)
  local data, err = schema.validate_routes(payload(servers, redirect), deps)
  assert.is_not_nil(data, err)
  return router.compile(data)
end

local function backend_for(compiled, host, uri)
  local entry = router.find(compiled, host)
  if entry == nil then
    return "no host"
  end
  local location = router.match(entry, uri)
  return location and location.backend or "404"
end

describe("router matching", function()
  local routes = compile({
    ["app.example.com"] = { hsts = false, locations = {
      loc("/", "prefix", "root"),
      loc("/foo", "prefix", "foo"),
      loc("/foo/bar", "prefix", "foobar"),
      loc("/foo/bar", "exact", "foobar-exact"),
      loc("/exact", "exact", "exact"),
    } },
    ["noroot.example.com"] = { hsts = false, locations = { loc("/api", "prefix", "api") } },
  })

  it("prefers Exact over every Prefix", function()
    assert.are.equal("foobar-exact", backend_for(routes, "app.example.com", "/foo/bar"))
    assert.are.equal("exact", backend_for(routes, "app.example.com", "/exact"))
  end)

  it("matches a Prefix path element-wise, the longest first", function()
    assert.are.equal("foo", backend_for(routes, "app.example.com", "/foo"))
    assert.are.equal("foo", backend_for(routes, "app.example.com", "/foo/"))
    assert.are.equal("foo", backend_for(routes, "app.example.com", "/foo/baz"))
    assert.are.equal("foobar", backend_for(routes, "app.example.com", "/foo/bar/"))
    assert.are.equal("foobar", backend_for(routes, "app.example.com", "/foo/bar/x"))
    assert.are.equal("root", backend_for(routes, "app.example.com", "/foobar"))
    assert.are.equal("root", backend_for(routes, "app.example.com", "/exact/more"))
  end)

  it("answers 404 where a host without Prefix / matches nothing", function()
    assert.are.equal("api", backend_for(routes, "noroot.example.com", "/api/v1"))
    assert.are.equal("404", backend_for(routes, "noroot.example.com", "/apix"))
    assert.are.equal("404", backend_for(routes, "noroot.example.com", "/"))
  end)

  it("knows only listed hosts", function()
    assert.are.equal("no host", backend_for(routes, "other.example.com", "/"))
    assert.are.equal("no host", backend_for(routes, nil, "/"))
  end)

  it("serves a wildcard for exactly one label, after the exact name", function()
    local wild = compile({
      ["*.example.com"] = { hsts = false, locations = { loc("/", "prefix", "wild") } },
      ["a.example.com"] = { hsts = false, locations = { loc("/", "prefix", "exact-host") } },
    })
    assert.are.equal("wild", backend_for(wild, "b.example.com", "/"))
    assert.are.equal("exact-host", backend_for(wild, "a.example.com", "/"))
    assert.are.equal("no host", backend_for(wild, "a.b.example.com", "/"))
    assert.are.equal("no host", backend_for(wild, "example.com", "/"))
  end)

  it("keeps ssl_redirect, hsts and the redirect target", function()
    local tls = compile({
      ["secure.example.com"] = { hsts = true, locations = { loc("/", "prefix", "s", true) } },
    }, { code = 301, port = 8443 })
    local host = router.find(tls, "secure.example.com")
    assert.is_true(host.hsts)
    assert.is_true(router.match(host, "/x").ssl_redirect)
    assert.are.equal(301, tls.redirect_code)
    assert.are.equal(":8443", tls.port_suffix)
    assert.are.equal("", compile({}).port_suffix)
  end)

  it("routes nothing before the first push", function()
    assert.is_nil(router.find(router.compile(nil), "app.example.com"))
  end)
end)

describe("util.schema routes", function()
  local function rejects(data, fragment)
    local out, err = schema.validate_routes(data, deps)
    assert.is_nil(out)
    assert.is_truthy(err:find(fragment, 1, true), err)
  end
  local good = { hsts = false, locations = { loc("/", "prefix", "ns-svc-80") } }

  it("accepts a valid payload and an empty one", function()
    assert.is_not_nil(schema.validate_routes(payload({ ["a.example.com"] = good }), deps))
    assert.is_not_nil(schema.validate_routes(payload({}), deps))
  end)

  it("refuses what the router would have to guess", function()
    rejects("x", "data: must be an object")
    rejects({ servers = {} }, "data.ssl_redirect: missing")
    rejects(payload({}, { code = 200, port = 443 }), "data.ssl_redirect.code")
    rejects(payload({}, { code = 308, port = 0 }), "data.ssl_redirect.port")
    rejects(payload({ ["Bad Host"] = good }), "lower-case host name")
    rejects(payload({ ["A.example.com"] = good }), "lower-case host name")
    rejects(payload({ ["a.example.com"] = { locations = good.locations } }), ".hsts: missing")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = {} } }), "at least one location")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = { loc("foo", "prefix", "b") } } }), ".path")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = { loc("/a b", "prefix", "b") } } }), ".path")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = { loc("/a/", "prefix", "b") } } }),
      "trailing '/'")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = { loc("/a", "regex", "b") } } }), ".match")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = { loc("/a", "exact", "b;c") } } }),
      ".backend")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = {
      { path = "/a", match = "exact", backend = "b" } } } }), ".ssl_redirect: missing")
    rejects(payload({ ["a.example.com"] = { hsts = false, locations = {
      loc("/a", "exact", "b"), loc("/a", "exact", "c") } } }), "duplicate exact /a")
  end)
end)
