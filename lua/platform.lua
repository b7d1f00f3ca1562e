--- nginx life-cycle hooks: `init_by_lua_block` and `init_worker_by_lua_block`.
--
-- Workers notice new configuration per request by comparing version numbers
-- in the shared dict (configuration.lua); a warm-up timer only moves the
-- expensive part (a whole section to decode) off the request path.
local M = {}

local MODULES = {
  "configuration", "balancer", "canary", "certificate", "client_tls", "host_tls", "util.ssl_conn", "router", "util.cidr", "util.limit",
  "headers", "mirror",
  "balancer.round_robin", "balancer.ewma", "balancer.chash",
  "balancer.sticky_balanced", "balancer.sticky_persistent",
  "auth", "auth_basic", "auth_digest", "auth_external", "memory",
}

--- Master process: load every module once so workers share the compiled code
-- (copy-on-write) and a syntax error fails `nginx -t` instead of a request.
-- `options` (from the template, every value chosen by us):
--   unavailable = {address, port} of the server answering 503 (balancer.lua)
--   state = directory of the last confirmed sections (configuration.restore)
function M.init(options)
  require("cjson.safe")
  for _, name in ipairs(MODULES) do
    require(name)
  end
  require("configuration").init()
  require("configuration").restore(options and options.state or nil)
  require("balancer").unavailable = options and options.unavailable or nil
  require("router").init()
  require("memory").record_master()
end

--- Each worker: seed the random numbers used by round robin offsets, EWMA
-- choices, canary weights and sticky session keys. Workers forked from one
-- master would otherwise share one sequence.
--
-- Then keep the balancer and router state built from a timer: at once, and
-- every WARM_INTERVAL seconds after. A whole backends section (nginx just
-- started, or the client compacted its chain of deltas) takes ~100-300 ms to
-- decode and build at 20,000 backends; done by the timer, no request waits
-- for it unless one arrives in that very window. Deltas and unchanged
-- versions cost the timer one shared-dict read.
M.WARM_INTERVAL = 0.2

function M.init_worker()
  math.randomseed(ngx.now() * 1000 + ngx.worker.pid() * 7919 + (ngx.worker.id() or 0))
  require("memory").count_traces()
  local ok, err = ngx.timer.at(0, M.warm)
  if ok then
    ok, err = ngx.timer.every(M.WARM_INTERVAL, M.warm)
  end
  if not ok then
    ngx.log(ngx.WARN, "cannot schedule the worker warm-up: ", err)
  end
end

-- Garbage of replaced versions. A change makes the old decoded sections
-- garbage (at 10,000 Ingresses several MB per worker); left to LuaJIT's
-- pace (a cycle starts when the heap doubled) each worker's heap, and so
-- nginx's RSS, grew ~50% over the first hundreds of route changes before it
-- levelled off (bench/bench_dataplane.py, route changes). After a change
-- the collector runs without its pause (setpause GC_PAUSE_BUSY: a cycle
-- starts as soon as one ends, paced by allocation) and the timer adds steps
-- of GC_STEP_KB (as if that many KB had been allocated: a few ms of work
-- per tick, never one long pause) until GC_CYCLES whole cycles ended (the
-- first may have marked the old version live already); then the default
-- pause is back, so an idle worker's requests do no GC work.
-- While busy the step multiplier is GC_STEPMUL_BUSY (LuaJIT's default 200:
-- 2 units of collection per unit allocated): route changes arriving faster
-- than the timer's cycles end (a burst, or the bench's one per ~25 ms) left
-- up to a heap's worth of garbage floating, whose pages the allocator keeps.
-- Measured at 10,000 Ingresses, 300 route changes (nginx RSS, first change to
-- last): 200 +8.7/+9.8%, 400 +8.0/+6.0%, 1000 +5.7/+6.4%, 3000 +6.0% with
-- the p50 of a change to its first request x3. The cost falls on requests
-- that allocate while busy; the plain path allocates nothing. A timer step
-- does work in proportion to GC_STEP_KB times the multiplier: 205 KB at
-- 1000 is the work 1 MB was at LuaJIT's 200, a few ms per tick.
M.GC_STEP_KB = 205
M.GC_CYCLES = 2
M.GC_PAUSE_BUSY = 100
M.GC_STEPMUL_BUSY = 1000

local changes_now = require("util.changes").current
local seen_changes = nil
local cycles_due = 0
local idle_pause = nil -- the pause in force before a change (LuaJIT's 200)
local idle_stepmul = nil -- likewise the step multiplier (LuaJIT's 200)

local function collect_old_versions()
  local changes = changes_now()
  if changes ~= seen_changes then
    seen_changes, cycles_due = changes, M.GC_CYCLES
    if idle_pause == nil then
      idle_pause = collectgarbage("setpause", M.GC_PAUSE_BUSY)
      idle_stepmul = collectgarbage("setstepmul", M.GC_STEPMUL_BUSY)
    end
  end
  if cycles_due > 0 and collectgarbage("step", M.GC_STEP_KB) then
    cycles_due = cycles_due - 1
  end
  if cycles_due == 0 and idle_pause ~= nil then
    collectgarbage("setpause", idle_pause)
    collectgarbage("setstepmul", idle_stepmul)
    idle_pause = nil
  end
end

--- Timer callback; a failure only means the first request builds the state.
function M.warm(premature)
  if premature then
    return
  end
  for _, name in ipairs({ "balancer", "router" }) do
    local ok, err = pcall(require(name).warm)
    if not ok then
      ngx.log(ngx.ERR, "warming ", name, " failed: ", err)
    end
  end
  collect_old_versions()
  require("memory").record()
end

return M
