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
  "auth", "auth_basic", "auth_digest", "auth_external", "memory", "gc",
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
  require("gc").tick()
  require("memory").record()
end

return M
