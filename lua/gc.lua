--- The pace of each worker's Lua garbage collector: idle (LuaJIT's own
-- pace) or busy (right after configuration changed), a small state machine.
--
-- A change makes the old decoded sections garbage (at 10,000 Ingresses
-- several MB per worker); left to LuaJIT's pace (a cycle starts when the
-- heap doubled) each worker's heap, and so nginx's RSS, grew ~50% over the
-- first hundreds of route changes before it levelled off
-- (bench/bench_dataplane.py, route changes). So a change makes the worker
-- busy from its next warm-up tick: the collector runs without its pause
-- (setpause PAUSE_BUSY: a cycle starts as soon as one ends, paced by
-- allocation) and the warm-up timer
-- adds steps of STEP_KB (as if that many KB had been allocated: a few ms of
-- work per tick, never one long pause) until CYCLES whole cycles ended (the
-- first may have marked the old version live already); then it is idle
-- again with the default pause, so an idle worker's requests do no GC work.
--
-- While busy the step multiplier is STEPMUL_BUSY (LuaJIT's default 200: 2
-- units of collection per unit allocated): route changes arriving faster
-- than cycles end (a burst, or the bench's one per ~20 ms) keep garbage
-- floating, up to the work of a cycle divided by the multiplier, whose pages
-- the allocator keeps. Measured at 10,000 Ingresses, 1,000 route changes
-- (nginx RSS, before the first change to after the last; p50 of a change to
-- its first request): 300 +10.7% 11 ms, 1000 +4.4-5.0% 14-15 ms, 1500
-- +3.8-4.8% 17-21 ms, 2000 +3.6-3.9% 20-21 ms, 4000 +5.3-6.6% 31-33 ms (the
-- extra work lengthens each change, so more of them overlap). The cost falls
-- on what allocates while busy (POSTs, refreshes); the plain request path
-- allocates nothing.
--
-- A worker's first configuration (until a tick sees no change with a route
-- table in force) is collected at STEPMUL_FIRST: that load replaces
-- nothing, most of what it allocates stays live, and collecting harder only
-- took CPU from the controller starting beside it (cold start to ready at 10,000 Ingresses, 2 cores: 4.3-4.9 s at
-- 1000, 4.6-6.2 s at 1500, 5.4-5.7 s at 2000).
require("util.cold").module() -- per change, not per request (util/cold.lua)

local M = {}

M.STEP_KB = 205
M.CYCLES = 2
M.PAUSE_BUSY = 100
M.STEPMUL_BUSY = 2000
M.STEPMUL_FIRST = 1000

local changes_now = require("util.changes").current

-- idle: `idle_pause` nil, LuaJIT's settings in force; busy: `cycles_due`
-- cycles still to end, the idle settings kept to put back. `configured`:
-- the first configuration is in (a route table in force, then a tick
-- without a change).
local seen_changes = nil
local cycles_due = 0
local idle_pause, idle_stepmul = nil, nil
local configured = false

-- A change reached this worker (`first`: its first configuration): busy
-- from now until CYCLES more cycles ended.
local function busy(first)
  cycles_due = M.CYCLES
  local stepmul = first and M.STEPMUL_FIRST or M.STEPMUL_BUSY
  if idle_pause == nil then
    idle_pause = collectgarbage("setpause", M.PAUSE_BUSY)
    idle_stepmul = collectgarbage("setstepmul", stepmul)
  elseif not first then
    collectgarbage("setstepmul", stepmul) -- the first configuration is in: harder from now
  end
end

--- From the warm-up timer: notice a change, step while busy, back to idle
-- once the cycles ended.
function M.tick()
  local changes = changes_now()
  if changes ~= seen_changes then
    seen_changes = changes
    busy(not configured)
  elseif not configured then
    configured = require("configuration").version("routes") > 0
  end
  if cycles_due > 0 and collectgarbage("step", M.STEP_KB) then
    cycles_due = cycles_due - 1
  end
  if cycles_due == 0 and idle_pause ~= nil then
    collectgarbage("setpause", idle_pause)
    collectgarbage("setstepmul", idle_stepmul)
    idle_pause, idle_stepmul = nil, nil
  end
end

return M
