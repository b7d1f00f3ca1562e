-- lua/deadline.lua: checking a policy's "deadline" and each attempt's time,
-- in milliseconds, bounded by what is left of the whole request.
local deadline = require("deadline")

describe("deadline", function()
  it("checks its policy", function()
    assert.is_true(deadline.check(nil, "d"))
    assert.is_true(deadline.check({ request_ms = 700, attempt_ms = 600 }, "d"))
    assert.is_true(deadline.check({ attempt_ms = 1 }, "d"))
    assert.is_nil(deadline.check({}, "d"))
    assert.is_nil(deadline.check({ request_ms = 0 }, "d"))
    assert.is_nil(deadline.check({ request_ms = 1.5 }, "d"))
    assert.is_nil(deadline.check({ request_ms = "700" }, "d"))
    assert.is_nil(deadline.check({ attempt_ms = 86400001 }, "d"))
    assert.is_nil(deadline.check("x", "d"))
  end)

  it("gives each attempt backendRequest, or the time left when less", function()
    local d = deadline.compile({ request_ms = 700, attempt_ms = 600 })
    assert.are.equal(0.6, deadline.seconds(d, 100.0, 100.0)) -- first attempt: 600 ms
    assert.are.equal(0.1, deadline.seconds(d, 100.6, 100.0)) -- the retry after 600 ms: 100 ms left
    assert.are.equal(0.001, deadline.seconds(d, 100.9, 100.0)) -- none left: 1 ms, a 504 at once
  end)

  it("takes either limit alone", function()
    assert.are.equal(0.25, deadline.seconds(deadline.compile({ attempt_ms = 250 }), 5.0, 1.0))
    assert.are.equal(0.3, deadline.seconds(deadline.compile({ request_ms = 500 }), 1.2, 1.0))
    assert.is_nil(deadline.compile(nil))
  end)
end)
