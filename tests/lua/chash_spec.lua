package.path = "./tests/lua/?.lua;" .. package.path
local chash = require("balancer.chash")
local h = require("helpers")

local function backend(n, hash_by)
  return { name = "b", endpoints = h.endpoints(n), upstream_hash_by = hash_by or "$request_uri" }
end

describe("balancer.chash", function()
  it("parses key templates into variables and literals", function()
    assert.same({ { var = "host" }, "-", { var = "request_uri" } }, chash.parse_key_template("$host-$request_uri"))
    assert.same({ { var = "a" }, { var = "b" } }, chash.parse_key_template("$a$b"))
  end)

  it("sends one key to one endpoint every time", function()
    local b = chash.new(backend(4), h.deps())
    local first = b:balance(h.request({ request_uri = "/x" }))
    for _ = 1, 20 do
      assert.same(first, b:balance(h.request({ request_uri = "/x" })))
    end
  end)

  it("uses every variable of the template", function()
    local b = chash.new(backend(8, "$host$request_uri"), h.deps())
    local seen = {}
    for i = 1, 50 do
      seen[b:balance(h.request({ host = "h" .. i, request_uri = "/same" })).address] = true
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    assert.is_true(n > 3)
  end)

  it("keeps keys of the remaining endpoints when one goes", function()
    local b = chash.new(backend(4), h.deps())
    local before = {}
    for i = 1, 400 do
      before[i] = b:balance(h.request({ request_uri = "/" .. i })).address
    end
    local remaining = h.endpoints(4)
    table.remove(remaining, 2)
    b:sync({ name = "b", endpoints = remaining, upstream_hash_by = "$request_uri" })
    for i = 1, 400 do
      local now = b:balance(h.request({ request_uri = "/" .. i })).address
      if before[i] ~= "10.0.0.2" then
        assert.equals(before[i], now)
      end
    end
  end)
end)
