local router = require("router")
local schema = require("util.schema")
local conditions = require("conditions")

local deps = require("helpers").schema_deps()
local NULL = deps.null

-- Lua patterns stand in for PCRE: the specs use the common subset.
local function find(subject, pattern, options)
  if options == "ijo" then
    return subject:lower():find(pattern:lower())
  end
  assert(options == "jo")
  return subject:find(pattern)
end
router.regex_find = find

local POLICY = {
  fast = false, lane = "@platform_proxy_off", scheme = "http", body_size = 0, timeouts = { 5, 60, 60 },
  upstream_vhost = "", ssl_redirect = false, redirect = NULL, rewrite_target = NULL, cors = NULL,
  allow = {}, deny = {}, limit_rps = 0, limit_burst = 0, limit_connections = 0,
}

local function route(backend, when, nxt)
  return { backend = backend, policy = "aa", rewrite = NULL, zone = NULL, when = when, next = nxt }
end

local function regex(pattern, r)
  r.pattern, r.length = pattern, #pattern
  return r
end

local function compile(h)
  local data, err = schema.validate_routes({
    hosts = { ["gw.example"] = { hsts = false, redirect = NULL, exact = h.exact or {}, prefix = h.prefix or {},
                                 regex = h.regex or {} } },
    default = { hsts = false, redirect = NULL, exact = {}, prefix = {}, regex = {} },
    policies = { aa = POLICY }, hsts = "", ssl_redirect = { code = 308, port = 443 },
  }, deps)
  assert.is_not_nil(data, err)
  return router.find(router.compile(data), "gw.example")
end

-- A request: headers by nginx variable name, query arguments, method.
local function request(headers, args, method)
  local vars = {}
  for name, v in pairs(headers or {}) do
    vars["http_" .. name:lower():gsub("-", "_")] = v
  end
  return {
    header = function(var) return vars[var] end,
    args = function() return args or {} end,
    method = function() return method or "GET" end,
  }
end

local function pick(host, uri, req)
  local location = router.match(host, uri)
  if location ~= nil and location.when ~= nil then
    location = conditions.select(host, uri, req, find)
  end
  return location and location.backend or "404"
end

describe("conditions", function()
  it("takes the first candidate of a path whose conditions all hold", function()
    local host = compile({ prefix = {
      ["/"] = route("both", { headers = { { "x-env", "canary", false }, { "x-ver", "^v2", true } } },
        route("env", { headers = { { "x-env", "canary", false } } },
          route("get", { method = "GET" }, route("plain")))),
    } })
    assert.are.equal("both", pick(host, "/a", request({ ["X-Env"] = "canary", ["X-Ver"] = "v2.1" })))
    assert.are.equal("env", pick(host, "/a", request({ ["X-Env"] = "canary", ["X-Ver"] = "v1" })))
    assert.are.equal("get", pick(host, "/a", request({ ["X-Env"] = "Canary" })))  -- values are case-sensitive
    assert.are.equal("plain", pick(host, "/a", request({}, {}, "POST")))
  end)

  it("matches query parameters by exact name, first value, or regex", function()
    local host = compile({ exact = {
      ["/q"] = route("exact", { query = { { "animal", "whale", false } } },
        route("regex", { query = { { "color", "^bl", true } } },
          route("flag", { query = { { "flag", "", false } } }))),
    } })
    assert.are.equal("exact", pick(host, "/q", request({}, { animal = { "whale", "dolphin" } })))
    assert.are.equal("404", pick(host, "/q", request({}, { animal = { "dolphin", "whale" } })))
    assert.are.equal("404", pick(host, "/q", request({}, { Animal = "whale" })))  -- names are case-sensitive
    assert.are.equal("regex", pick(host, "/q", request({}, { color = "blue" })))
    assert.are.equal("flag", pick(host, "/q", request({}, { flag = true })))
  end)

  it("falls through to the next path that matches when no candidate holds", function()
    local host = compile({
      exact = { ["/foo/bar"] = route("exact-get", { method = "GET" }) },
      prefix = {
        ["/foo/bar"] = route("long-post", { method = "POST" }),
        ["/foo"] = route("foo-h", { headers = { { "x", "1", false } } }),
        ["/"] = route("root-h", { headers = { { "y", "1", false } } }),
      },
      regex = { regex("^/foo/b..", route("regex-h", { headers = { { "z", "1", false } } })) },
    })
    assert.are.equal("exact-get", pick(host, "/foo/bar", request()))
    assert.are.equal("long-post", pick(host, "/foo/bar", request({}, {}, "POST")))
    -- /foo/bar/x: Prefix /foo/bar (8), then the 8-character regex (a Prefix wins a tie), then /foo, then /.
    assert.are.equal("regex-h", pick(host, "/foo/bar/x", request({ z = "1", x = "1" }, {}, "PUT")))
    assert.are.equal("foo-h", pick(host, "/foo/bar/x", request({ x = "1", y = "1" }, {}, "PUT")))
    assert.are.equal("root-h", pick(host, "/foo/bar/x", request({ y = "1" }, {}, "PUT")))
    assert.are.equal("404", pick(host, "/foo/bar/x", request({}, {}, "PUT")))
    assert.are.equal("404", pick(host, "/other", request({ x = "1" })))
  end)

  it("chooses by conditions and splits inside a per-address table (lua/bound.lua) too", function()
    local host = { hsts = false, redirect = NULL, exact = {}, regex = {},
                   prefix = { ["/"] = route("canary", { headers = { { "x-env", "canary", false } } }, route("web")) } }
    local any = { hsts = false, redirect = NULL, exact = {}, regex = {}, prefix = {
      ["/"] = { backend = NULL, policy = "aa", rewrite = NULL, zone = NULL, split = { { "a.b.80.route", 1 } },
                when = { method = "POST" } } } }
    local data, err = schema.validate_routes({
      hosts = {}, default = { hsts = false, redirect = NULL, exact = {}, prefix = {}, regex = {} },
      policies = { aa = POLICY }, hsts = "", ssl_redirect = { code = 308, port = 443 },
      binds = { { address = "10.0.0.7", port = 80, fallback = true, hosts = { ["gw.example"] = host },
                  default = any } },
    }, deps)
    assert.is_not_nil(data, err)
    local bound = require("bound")
    local t = bound.table(router.compile(data).binds, "10.0.0.7", "80")
    local named, fallback = bound.lookup(t, "gw.example"), select(2, bound.lookup(t, "other.example"))
    assert.are.equal("canary", pick(named, "/x", request({ ["X-Env"] = "canary" })))
    assert.are.equal("web", pick(named, "/x", request({ ["X-Env"] = "other" })))
    -- The table's any-host entry: a split chosen by its condition, nothing (404) otherwise.
    local chosen = conditions.select(fallback, "/x", request({}, {}, "POST"), find)
    assert.is_not_nil(chosen.split)
    assert.is_nil(chosen.backend)
    assert.is_nil(conditions.select(fallback, "/x", request({}, {}, "GET"), find))
  end)

  it("leaves paths without conditions to the plain match", function()
    local host = compile({ prefix = { ["/api"] = route("api"), ["/"] = route("root", { method = "GET" }) } })
    local location = router.match(host, "/api/x")
    assert.are.equal("api", location.backend)
    assert.is_nil(location.when)
  end)

  it("refuses malformed conditions and splits", function()
    local function refused(r)
      local data = schema.validate_routes({
        hosts = { ["gw.example"] = { hsts = false, redirect = NULL, exact = { ["/"] = r }, prefix = {}, regex = {} } },
        default = { hsts = false, redirect = NULL, exact = {}, prefix = {}, regex = {} },
        policies = { aa = POLICY }, hsts = "", ssl_redirect = { code = 308, port = 443 },
      }, deps)
      return data == nil
    end
    assert.is_true(refused(route("a", { headers = { { "bad header", "1", false } } })))
    assert.is_true(refused(route("a", { method = "get;" })))
    assert.is_true(refused(route("a", nil, route("b"))))  -- a next without conditions before it
    assert.is_true(refused({ backend = NULL, policy = "aa", rewrite = NULL, zone = NULL, split = { { NULL, 0 } } }))
    assert.is_true(refused({ backend = NULL, policy = "aa", rewrite = NULL, zone = NULL, split = {} }))
    assert.is_false(refused({ backend = NULL, policy = "aa", rewrite = NULL, zone = NULL,
                              split = { { "a.b.80.route", 2 }, { NULL, 1 } } }))
  end)
end)
