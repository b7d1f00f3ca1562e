--- nginx life-cycle hooks: `init_by_lua_block` and `init_worker_by_lua_block`.
--
-- Workers notice new configuration per request by comparing version numbers
-- in the shared dict (configuration.lua); the only timer is the one-shot
-- warm-up when a worker starts.
local M = {}

local MODULES = {
  "configuration", "balancer", "canary", "certificate", "router",
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
--
-- Then build the balancer and router state in a zero-delay timer: a new
-- worker (every reload makes new ones) would otherwise pay for decoding all
-- backends on its first request, ~100 ms at 20,000 backends.
function M.init_worker()
  math.randomseed(ngx.now() * 1000 + ngx.worker.pid() * 7919 + (ngx.worker.id() or 0))
  local ok, err = ngx.timer.at(0, M.warm)
  if not ok then
    ngx.log(ngx.WARN, "cannot schedule the worker warm-up: ", err)
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
end

return M
