local helpers = require("helpers")
local limit = require("util.limit")

local function dict()
  local data, flags = {}, {}
  return {
    get = function(_, key) return data[key], flags[key] end,
    set = function(_, key, value, _, f) data[key], flags[key] = value, f return true end,
    incr = function(_, key, by, init)
      if data[key] == nil then
        if init == nil then return nil end
        data[key] = init
      end
      data[key] = data[key] + by
      return data[key]
    end,
  }
end

describe("util.limit", function()
  it("lets rps * burst through at once, then one request per 1/rps (nginx's leaky bucket, nodelay)", function()
    local clock = helpers.clock()
    limit.dict, limit.now = dict(), clock.now
    local passed = 0
    for _ = 1, 20 do
      if limit.request("k", 2, 10) then
        passed = passed + 1
      end
    end
    assert.are.equal(11, passed) -- the first plus a burst of 10
    assert.is_false(limit.request("k", 2, 10))
    clock.advance(0.5) -- one request drained at 2 r/s
    assert.is_true(limit.request("k", 2, 10))
    assert.is_false(limit.request("k", 2, 10))
    assert.is_true(limit.request("other", 2, 10)) -- per key
  end)

  it("counts connections up to the limit and releases them", function()
    limit.dict = dict()
    assert.is_true(limit.acquire("c", 2))
    assert.is_true(limit.acquire("c", 2))
    assert.is_false(limit.acquire("c", 2))
    limit.release("c")
    assert.is_true(limit.acquire("c", 2))
  end)
end)
