local weighted = require("weighted")
local helpers = require("helpers")

describe("weighted", function()
  it("splits requests by weight, invalid shares as nil", function()
    local w = weighted.compile({ { "a", 3 }, { false, 1 }, { "b", 6 } })
    local random = helpers.random(7)
    local counts = { a = 0, b = 0, invalid = 0 }
    for _ = 1, 10000 do
      local name = weighted.pick(w, random) or "invalid"
      counts[name] = counts[name] + 1
    end
    assert.is_true(math.abs(counts.a - 3000) < 300, counts.a)
    assert.is_true(math.abs(counts.b - 6000) < 300, counts.b)
    assert.is_true(math.abs(counts.invalid - 1000) < 200, counts.invalid)
  end)

  it("maps each draw to its backend at the bounds", function()
    local w = weighted.compile({ { "a", 1 }, { "b", 2 } })
    local draws = { 1, 2, 3 }
    local i = 0
    local function random(n)
      assert.are.equal(3, n)
      i = i + 1
      return draws[i]
    end
    assert.are.same({ "a", "b", "b" }, { weighted.pick(w, random), weighted.pick(w, random), weighted.pick(w, random) })
  end)

  it("answers nil for an all-invalid split", function()
    assert.is_nil(weighted.pick(weighted.compile({ { false, 1 } })))
  end)
end)
