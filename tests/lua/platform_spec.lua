-- platform.lua's worker start: a zero-delay timer warms the balancer and the
-- router, and a failure there is logged instead of breaking the worker.
package.path = "./tests/lua/?.lua;" .. package.path
local h = require("helpers")

local function with_platform(stubs, fn)
  local timers, logs = {}, {}
  local fake_ngx = {
    now = function() return 1 end,
    worker = { pid = function() return 42 end, id = function() return 0 end },
    timer = {
      at = function(delay, callback) timers[#timers + 1] = { "at", delay, callback } return true end,
      every = function(delay, callback) timers[#timers + 1] = { "every", delay, callback } return true end,
    },
    log = function(level, ...) logs[#logs + 1] = { level, table.concat({ ... }) } end,
    ERR = 1, WARN = 2,
  }
  stubs["util.changes"] = stubs["util.changes"] or { current = function() return 0 end }
  stubs.gc = stubs.gc or { tick = function() end }
  stubs.memory = stubs.memory or { record = function() end, record_master = function() end,
                                   count_traces = function() end }
  h.with_module("platform", fake_ngx, stubs, fn, timers, logs)
end

describe("platform.init_worker", function()
  it("warms the balancer and the router at once and then periodically, from timers, and records the heap", function()
    local warmed = {}
    local stubs = {
      balancer = { warm = function() warmed[#warmed + 1] = "balancer" end },
      router = { warm = function() warmed[#warmed + 1] = "router" end },
      memory = { record = function() warmed[#warmed + 1] = "memory" end,
                 count_traces = function() warmed[#warmed + 1] = "traces" end },
    }
    with_platform(stubs, function(platform, timers)
      platform.init_worker()
      assert.same({ "traces" }, warmed) -- counting JIT traces starts with the worker
      table.remove(warmed)
      assert.same({ { "at", 0 }, { "every", platform.WARM_INTERVAL } },
                  { { timers[1][1], timers[1][2] }, { timers[2][1], timers[2][2] } })
      assert.same({}, warmed) -- not in init_worker itself
      timers[1][3](false)
      assert.same({ "balancer", "router", "memory" }, warmed) -- after the collection step of this tick
      timers[2][3](false)
      assert.same({ "balancer", "router", "memory", "balancer", "router", "memory" }, warmed)
    end)
  end)

  it("logs a failed warm-up and still warms the rest; does nothing when premature", function()
    local warmed = {}
    local stubs = {
      balancer = { warm = function() error("boom") end },
      router = { warm = function() warmed[#warmed + 1] = "router" end },
    }
    with_platform(stubs, function(platform, _, logs)
      platform.warm(true)
      assert.same({}, warmed)
      platform.warm(false)
      assert.same({ "router" }, warmed)
      assert.equals(1, #logs)
      assert.truthy(logs[1][2]:find("warming balancer failed", 1, true))
    end)
  end)
end)
