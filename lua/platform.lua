--- nginx life-cycle hooks: `init_by_lua_block` and `init_worker_by_lua_block`.
--
-- There are no timers: workers notice new configuration per request by
-- comparing version numbers in the shared dict (configuration.lua).
local M = {}

local MODULES = {
  "configuration", "balancer", "canary", "certificate",
  "balancer.round_robin", "balancer.ewma", "balancer.chash",
  "balancer.sticky_balanced", "balancer.sticky_persistent",
}

--- Master process: load every module once so workers share the compiled code
-- (copy-on-write) and a syntax error fails `nginx -t` instead of a request.
-- `options` (from the template, every value chosen by us):
--   unavailable = {address, port} of the server answering 503 (balancer.lua)
function M.init(options)
  require("cjson.safe")
  for _, name in ipairs(MODULES) do
    require(name)
  end
  require("configuration").init()
  require("balancer").unavailable = options and options.unavailable or nil
end

--- Each worker: seed the random numbers used by round robin offsets, EWMA
-- choices, canary weights and sticky session keys. Workers forked from one
-- master would otherwise share one sequence.
function M.init_worker()
  math.randomseed(ngx.now() * 1000 + ngx.worker.pid() * 7919 + (ngx.worker.id() or 0))
end

return M
