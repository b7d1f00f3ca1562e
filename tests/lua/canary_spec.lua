package.path = "./tests/lua/?.lua;" .. package.path
local canary = require("canary")
local h = require("helpers")

-- A regex stand-in good enough for the simple patterns below.
local deps = {
  match = function(subject, pattern) return subject:find(pattern) ~= nil end,
  random = h.random(7),
}

local function decide(policy, header, cookie)
  return canary.use_alternative(policy, { header = header, cookie = cookie }, deps)
end

describe("canary", function()
  it("routes nothing without a policy or weight", function()
    assert.is_false(canary.use_alternative(nil, {}, deps))
    assert.is_false(decide({ weight = 0 }))
  end)

  it("obeys header always/never over cookie and weight", function()
    local policy = { header = "X-Canary", cookie = "canary", weight = 100, weight_total = 100 }
    assert.is_true(decide(policy, "always", "never"))
    assert.is_false(decide(policy, "never", "always"))
  end)

  it("lets other header values fall through", function()
    local policy = { header = "X-Canary", cookie = "canary", weight = 0 }
    assert.is_false(decide(policy, "maybe"))
    assert.is_true(decide(policy, "maybe", "always"))
  end)

  it("routes an exact header_value and ignores everything else", function()
    local policy = { header = "X-Canary", header_value = "beta", cookie = "canary", weight = 0 }
    assert.is_true(decide(policy, "beta"))
    assert.is_false(decide(policy, "always"))
    assert.is_false(decide(policy, "betax"))
    assert.is_true(decide(policy, "other", "always"))
  end)

  it("matches header_pattern", function()
    local policy = { header = "X-Canary", header_pattern = "^v[0-9]+$", weight = 0 }
    assert.is_true(decide(policy, "v2"))
    assert.is_false(decide(policy, "vx"))
  end)

  it("obeys cookie always/never over weight", function()
    assert.is_true(decide({ cookie = "canary", weight = 0 }, nil, "always"))
    assert.is_false(decide({ cookie = "canary", weight = 100, weight_total = 100 }, nil, "never"))
    assert.is_false(decide({ cookie = "canary", weight = 0 }, nil, "other"))
  end)

  it("keeps sticky sessions on their side unless header or cookie say otherwise", function()
    local policy = { header = "X-Canary", cookie = "canary", weight = 50 }
    local function with(affinity, header, cookie)
      return canary.use_alternative(policy, { affinity = affinity, header = header, cookie = cookie }, deps)
    end
    for _ = 1, 20 do
      assert.is_false(with("primary"))
      assert.is_true(with("alternative"))
    end
    assert.is_true(with("primary", "always"))
    assert.is_false(with("alternative", nil, "never"))
  end)

  it("routes weight out of weight_total", function()
    local function share(policy)
      local n = 0
      for _ = 1, 10000 do
        if decide(policy) then n = n + 1 end
      end
      return n / 10000
    end
    assert.is_true(math.abs(share({ weight = 30 }) - 0.30) < 0.02)
    assert.is_true(math.abs(share({ weight = 30, weight_total = 1000 }) - 0.03) < 0.01)
    assert.equals(1, share({ weight = 5, weight_total = 5 }))
  end)
end)
