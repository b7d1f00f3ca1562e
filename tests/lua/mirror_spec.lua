-- lua/mirror.lua with several copies of a request (Gateway API: a rule may
-- repeat RequestMirror): the policy's "also", the per-copy shares, and each
-- subrequest taking its own target by the index in its location's URI.

local fake = {}

local function reset()
  for k in pairs(fake) do fake[k] = nil end
  fake.var, fake.ctx = { host = "app.example", request_uri = "/p?q=1" }, {}
  fake.exit = function(code) fake.exited = code; return code end
  fake.req = { set_uri = function(uri) fake.set_uri = uri end }
end

reset()
_G.ngx = fake
package.loaded.headers, package.loaded.mirror = nil, nil
local picked = {}
package.loaded.balancer = {
  endpoint_of = function(name)
    picked[#picked + 1] = name
    if name ~= "gone" then
      return "10.9.0.1:8080"
    end
  end,
}
local mirror = require("mirror")
mirror.init()
_G.ngx = nil

local function policy(also)
  return { scheme = "http", backend = "default.a.80.route", host = "", uri = {}, numerator = 100,
           denominator = 100, also = also }
end

local function copy(backend, numerator)
  return { backend = backend, numerator = numerator or 100, denominator = 100 }
end

describe("mirror with several copies", function()
  before_each(function()
    reset()
    picked = {}
  end)

  it("checks every copy", function()
    assert.is_true(mirror.check(policy({ copy("default.b.80.route"), { address = "10.0.0.2:80", numerator = 1,
                                                                        denominator = 3 } }), "m"))
    assert.is_nil(mirror.check(policy({ { backend = "b", address = "10.0.0.1:80", numerator = 1, denominator = 1 } }), "m"))
    assert.is_nil(mirror.check(policy({ copy("bad name") }), "m"))
    assert.is_nil(mirror.check(policy({ copy("b", 101) }), "m"))
    assert.is_nil(mirror.check(policy("b"), "m"))
    local many = {}
    for i = 1, 16 do many[i] = copy("b" .. i) end
    assert.is_nil(mirror.check(policy(many), "m")) -- 17 copies
    many[16] = nil
    assert.is_true(mirror.check(policy(many), "m"))
  end)

  it("marks each copy by its own share and lists the targets in the lane's order", function()
    mirror.prepare(mirror.compile(policy({ copy("default.b.80.route", 0), copy("default.c.80.route") })))
    assert.are.equal("101", fake.var.platform_mirror)
    assert.are.equal("default.a.80.route default.b.80.route default.c.80.route", fake.var.platform_mirror_backend)
    assert.are.equal("/p?q=1", fake.var.platform_mirror_uri)
    assert.are.equal("app.example", fake.var.platform_mirror_host)
  end)

  it("sends no copy when no share wins", function()
    local p = policy({ copy("default.b.80.route", 0) })
    p.numerator = 0
    mirror.prepare(mirror.compile(p))
    assert.are.equal("", fake.var.platform_mirror)
  end)

  it("gives each subrequest its own target by the index in its URI", function()
    fake.var.platform_mirror = "101"
    fake.var.platform_mirror_backend = "default.a.80.route 10.0.0.2:80 default.c.80.route"
    fake.var.uri = "/_platform_mirror"
    mirror.subrequest()
    assert.are.same({ "default.a.80.route" }, picked)
    assert.are.equal("10.9.0.1:8080", fake.var.platform_mirror_upstream)
    assert.is_nil(fake.exited)

    fake.var.uri = "/_platform_mirror/2" -- not chosen for this request
    mirror.subrequest()
    assert.are.equal(204, fake.exited)

    fake.exited, fake.var.platform_mirror = nil, "111"
    mirror.subrequest()
    assert.are.equal("10.0.0.2:80", fake.var.platform_mirror_upstream) -- an address: no balancer
    assert.are.same({ "default.a.80.route" }, picked)

    fake.var.uri = "/_platform_mirror/3"
    mirror.subrequest()
    assert.are.same({ "default.a.80.route", "default.c.80.route" }, picked)
  end)

  it("answers 204 for an index beyond the targets and 503 for a Backend without endpoints", function()
    fake.var.platform_mirror, fake.var.platform_mirror_backend = "11", "a"
    fake.var.uri = "/_platform_mirror_nobody/2"
    mirror.subrequest()
    assert.are.equal(204, fake.exited)
    fake.exited, fake.var.platform_mirror_backend, fake.var.uri = nil, "gone", "/_platform_mirror_grpc"
    fake.var.platform_mirror_uri = "/svc/Method?x"
    mirror.subrequest(true)
    assert.are.equal(503, fake.exited)
    assert.are.equal("/svc/Method", fake.set_uri)
  end)
end)
