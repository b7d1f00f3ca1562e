-- lua/gc.lua: each worker's collector is busy (no pause, a higher step
-- multiplier) from the tick that notices a change until CYCLES whole cycles
-- ended, and idle (LuaJIT's settings) otherwise; its first configuration is
-- collected less hard than the changes after it.
package.path = "./tests/lua/?.lua;" .. package.path
local h = require("helpers")

-- collectgarbage replaced for the duration of fn: records the "step" calls
-- and reports a finished cycle on the calls listed in `finishes`.
local function with_gc(finishes, fn)
  local saved, steps, pauses, stepmuls = _G.collectgarbage, {}, { 200 }, { 200 }
  _G.collectgarbage = function(what, arg)
    if what == "setpause" or what == "setstepmul" then
      local list = what == "setpause" and pauses or stepmuls
      local previous = list[#list]
      list[#list + 1] = arg
      return previous
    end
    assert(what == "step", what)
    steps[#steps + 1] = arg
    return finishes[#steps] == true
  end
  local ok, err = pcall(fn, steps, pauses, stepmuls)
  _G.collectgarbage = saved
  if not ok then error(err, 0) end
end

-- gc with the change counter and the "routes" version in force stubbed.
local function with_pacer(changes, routes_version, fn)
  h.with_module("gc", {}, {
    ["util.changes"] = { current = function() return changes[1] end },
    configuration = { version = function(section)
      assert(section == "routes", section)
      return routes_version[1]
    end },
  }, fn)
end

describe("gc", function()
  it("after a change the timer notices, runs CYCLES whole cycles in steps, then nothing until the next change", function()
    local changes = { 1 }
    with_pacer(changes, { 1 }, function(gc)
      -- calls 2 and 4 finish a cycle; the 5th tick (no change since) steps no more
      with_gc({ [2] = true, [4] = true }, function(steps, pauses, stepmuls)
        gc.tick()
        assert.same({ 200, gc.PAUSE_BUSY }, pauses) -- no pause while old versions are garbage
        assert.same({ 200, gc.STEPMUL_FIRST }, stepmuls) -- the first configuration
        for _ = 1, 5 do
          gc.tick()
        end
        assert.equals(2, gc.CYCLES)
        assert.same({ gc.STEP_KB, gc.STEP_KB, gc.STEP_KB, gc.STEP_KB }, steps)
        assert.same({ 200, gc.PAUSE_BUSY, 200 }, pauses) -- the idle pause is back
        assert.same({ 200, gc.STEPMUL_FIRST, 200 }, stepmuls) -- and the idle step multiplier
        changes[1] = 2 -- a new version: two more cycles, collecting harder now
        gc.tick()
        assert.equals(5, #steps)
        assert.same({ 200, gc.PAUSE_BUSY, 200, gc.PAUSE_BUSY }, pauses)
        assert.same({ 200, gc.STEPMUL_FIRST, 200, gc.STEPMUL_BUSY }, stepmuls)
      end)
    end)
  end)

  it("counts as the first configuration every change until a tick sees none with a route table in force", function()
    local changes, routes = { 1 }, { 0 }
    with_pacer(changes, routes, function(gc)
      with_gc({}, function(_, _, stepmuls)
        gc.tick() -- nginx started: nothing posted yet
        gc.tick() -- quiet, but no route table: still waiting for the first one
        changes[1], routes[1] = 2, 1 -- the first push, over several ticks
        gc.tick()
        changes[1] = 3
        gc.tick()
        assert.same({ 200, gc.STEPMUL_FIRST }, stepmuls)
        gc.tick() -- quiet, with a route table: the first configuration is in
        changes[1] = 4 -- a route change while still busy: harder from now
        gc.tick()
        assert.same({ 200, gc.STEPMUL_FIRST, gc.STEPMUL_BUSY }, stepmuls)
        assert.is_true(gc.STEPMUL_BUSY > gc.STEPMUL_FIRST)
      end)
    end)
  end)
end)
