-- lua/headers.lua and lua/mirror.lua: checking, compiling and running header
-- programs against a fake ngx (request headers, response headers, variables).

-- One fake ngx table for the whole file (the modules keep the table they
-- loaded with); `reset` refills it before each case.
local fake = {}

local function reset()
  for k in pairs(fake) do fake[k] = nil end
  fake.var, fake.ctx, fake.header, fake.req_headers, fake.HTTP_OK = {}, {}, {}, {}, 200
  fake.req = {
    get_headers = function()
      local out = {}
      for k, v in pairs(fake.req_headers) do out[k:lower()] = v end
      return out
    end,
    set_header = function(name, value) fake.req_headers[name:lower()] = value end,
    clear_header = function(name) fake.req_headers[name:lower()] = nil end,
  }
  fake.exit = function(code) fake.exited = code end
  fake.redirect = function(url, code) fake.redirected = { url, code } end
  fake.print = function(text) fake.printed = text end
end

reset()
_G.ngx = fake
package.loaded.headers, package.loaded.mirror = nil, nil
local headers = require("headers")
local mirror = require("mirror")
_G.ngx = nil

describe("headers.check", function()
  it("accepts programs and nil", function()
    assert.is_true(headers.check(nil, "p"))
    assert.is_true(headers.check({ { op = "req_set", name = "X-A", value = { "v", { v = "host" } } } }, "p"))
  end)

  it("refuses unknown operations, bad names, CR/LF and nested ifs", function()
    local cases = {
      { { op = "lua", name = "x", value = {} } },
      { { op = "req_set", name = "X A", value = { "v" } } },
      { { op = "res_add", name = "X-A", value = { "a\r\nb" } } },
      { { op = "req_set", name = "X-A", value = { { v = "a b" } } } },
      { { op = "return", code = 99, value = {} } },
      { { op = "if", name = "host", value = {}, body = { { op = "if", name = "host", value = {}, body = {} } } } },
    }
    for _, program in ipairs(cases) do
      local ok, err = headers.check(program, "p")
      assert.is_nil(ok)
      assert.is_string(err)
    end
  end)
end)

describe("headers.run", function()
  before_each(reset)

  it("sets, appends and removes request headers case-insensitively", function()
    fake.req_headers = { ["x-set"] = "client", ["x-add"] = "one", ["x-remove"] = "gone" }
    headers.run(headers.compile({
      { op = "req_set", name = "X-Set", value = { "mine" } },
      { op = "req_add", name = "X-ADD", value = { "two" } },
      { op = "req_remove", name = "X-Remove", value = {} },
    }))
    assert.are.equal("mine", fake.req_headers["x-set"])
    assert.are.same({ "one", "two" }, fake.req_headers["x-add"])
    assert.is_nil(fake.req_headers["x-remove"])
  end)

  it("queues response operations for the header filter", function()
    fake.header = { ["X-Keep"] = "a", ["X-Drop"] = "b" }
    headers.run(headers.compile({
      { op = "res_set", name = "X-Frame-Options", value = { "DENY" } },
      { op = "res_add", name = "X-Keep", value = { "c" } },
      { op = "res_remove", name = "X-Drop", value = {} },
    }))
    assert.is_nil(fake.header["X-Frame-Options"]) -- not before the header filter
    headers.response()
    assert.are.equal("DENY", fake.header["X-Frame-Options"])
    assert.are.same({ "a", "c" }, fake.header["X-Keep"])
    assert.is_nil(fake.header["X-Drop"])
  end)

  it("reads variables, its own first, and compares in if", function()
    fake.var = { host = "app.example", http_x_user = "ann" }
    headers.run(headers.compile({
      { op = "var", name = "tier", value = { "gold-", { v = "http_x_user" } } },
      { op = "req_set", name = "X-Tier", value = { { v = "tier" }, "@", { v = "host" } } },
      { op = "if", name = "http_x_user", negate = false, value = { "ann" },
        body = { { op = "return", code = 403, value = { "no" } } } },
    }))
    assert.are.equal("gold-ann@app.example", fake.req_headers["x-tier"])
    assert.are.equal(403, fake.status)
    assert.are.equal("no", fake.printed)
  end)

  it("return: redirects for 3xx, nginx's page for an empty 4xx", function()
    headers.run(headers.compile({ { op = "return", code = 302, value = { "https://x.example/" } } }))
    assert.are.same({ "https://x.example/", 302 }, fake.redirected)
    reset()
    headers.run(headers.compile({ { op = "return", code = 404, value = {} } }))
    assert.are.equal(404, fake.exited)
  end)

  it("compiles an empty program to nothing", function()
    assert.is_nil(headers.compile({}))
    assert.is_nil(headers.compile(nil))
  end)
end)

describe("mirror", function()
  before_each(reset)

  local function policy(extra)
    local p = { scheme = "http", address = "10.0.0.1:80", host = "", uri = {}, numerator = 100, denominator = 100 }
    for k, v in pairs(extra or {}) do p[k] = v end
    return p
  end

  it("checks its policy", function()
    assert.is_true(mirror.check(policy(), "m"))
    assert.is_nil(mirror.check(policy({ scheme = "ftp" }), "m"))
    assert.is_nil(mirror.check(policy({ backend = "b" }), "m")) -- both address and backend
    assert.is_nil(mirror.check(policy({ uri = { { v = "host" } } }), "m"))
    assert.is_nil(mirror.check(policy({ numerator = 5, denominator = 4 }), "m"))
  end)

  it("prepares the copy's variables", function()
    fake.var = { host = "app.example", request_uri = "/p?q=1" }
    mirror.prepare(mirror.compile(policy({ uri = { "/copy", { v = "request_uri" } } })))
    assert.are.equal("1", fake.var.platform_mirror)
    assert.are.equal("10.0.0.1:80", fake.var.platform_mirror_backend)
    assert.are.equal("/copy/p?q=1", fake.var.platform_mirror_uri)
    assert.are.equal("app.example", fake.var.platform_mirror_host)
  end)

  it("copies none at 0 and every request at 100", function()
    local none = mirror.compile(policy({ numerator = 0 }))
    local all = mirror.compile(policy())
    for _ = 1, 50 do
      assert.is_false(mirror.chosen(none.copies[1]))
      assert.is_true(mirror.chosen(all.copies[1]))
    end
  end)
end)
