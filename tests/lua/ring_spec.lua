package.path = "./tests/lua/?.lua;" .. package.path
local ring = require("util.ring")
local h = require("helpers")

local function owners(r, n)
  local out = {}
  for i = 1, n do
    out[i] = r:find("key-" .. i).address
  end
  return out
end

describe("util.ring", function()
  it("returns nil when empty", function()
    assert.is_nil(ring.new({}):find("x"))
  end)

  it("spreads keys roughly evenly", function()
    local counts = {}
    for _, address in ipairs(owners(ring.new(h.endpoints(4)), 4000)) do
      counts[address] = (counts[address] or 0) + 1
    end
    for i = 1, 4 do
      local share = counts["10.0.0." .. i] / 4000
      assert.is_true(share > 0.15 and share < 0.35, "share " .. share)
    end
  end)

  it("moves only the keys of a removed endpoint", function()
    local all = h.endpoints(5)
    local before = owners(ring.new(all), 2000)
    local after = owners(ring.new({ all[1], all[2], all[4], all[5] }), 2000)
    for i = 1, 2000 do
      if before[i] ~= "10.0.0.3" then
        assert.equals(before[i], after[i])
      else
        assert.not_equals("10.0.0.3", after[i])
      end
    end
  end)

  it("does not depend on the order of endpoints", function()
    local all = h.endpoints(3)
    assert.same(owners(ring.new(all), 500), owners(ring.new({ all[3], all[1], all[2] }), 500))
  end)
end)
