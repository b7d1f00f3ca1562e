package.path = "./tests/lua/?.lua;" .. package.path
local round_robin = require("balancer.round_robin")
local h = require("helpers")

describe("balancer.round_robin", function()
  it("visits every endpoint in turn", function()
    local b = round_robin.new({ name = "b", endpoints = h.endpoints(3) }, h.deps())
    local counts = h.count(b, 300)
    for i = 1, 3 do
      assert.equals(100, counts["10.0.0." .. i .. ":8080"])
    end
    local first = b:balance().address
    local second = b:balance().address
    assert.not_equals(first, second)
  end)

  it("returns nil without endpoints", function()
    assert.is_nil(round_robin.new({ name = "b", endpoints = {} }, h.deps()):balance())
  end)

  it("follows endpoint changes on sync", function()
    local b = round_robin.new({ name = "b", endpoints = h.endpoints(3) }, h.deps())
    b:sync({ name = "b", endpoints = { { address = "10.9.9.9", port = 80 } } })
    for _ = 1, 5 do
      assert.equals("10.9.9.9", b:balance().address)
    end
  end)
end)
