--- Per client address limits of a route (limit-rps, limit-connections) in
-- the shared dict `platform_limits`, with the semantics of nginx's
-- limit_req (`burst=<rps * multiplier> nodelay`) and limit_conn that
-- ingress-nginx renders: a request over the limit gets 503 at once.
--
-- Requests: nginx's leaky bucket in thousandths of a request. `excess`
-- drains at `rps` per second; a request adds 1; a request that would leave
-- more than `burst` waiting is refused (and not counted). The bucket of a
-- key is one dict entry: value = time of the last accepted request (ms),
-- flags = its excess (an integer, as nginx keeps it). Like limit_req across
-- workers, the read and the write are not one atomic step: two workers may
-- both accept the last request of a burst (nginx's zone lock avoids that;
-- the error is at most one request per worker).
-- Connections: a counter per key, incremented in the rewrite phase and
-- decremented in the log phase of the same request.
local M = {}

-- The dict and the clock (specs put fakes here).
M.dict = ngx and ngx.shared.platform_limits
M.now = ngx and ngx.now

-- Entries expire once a bucket would have drained (and connections after a
-- day, should a log phase ever be skipped), so the dict does not fill with
-- addresses seen once.
local CONN_TTL = 86400

--- true when a request for `key` at `rps` with `burst` may go on.
function M.request(key, rps, burst)
  local dict = M.dict
  local ms = M.now() * 1000
  local last, excess = dict:get(key)
  if last ~= nil then
    local elapsed = ms - last
    if elapsed < 0 then
      elapsed = 0
    end
    excess = (excess or 0) - rps * elapsed + 1000
    if excess < 0 then
      excess = 0
    end
    if excess > burst * 1000 then
      return false
    end
  else
    excess = 0
  end
  local ttl = (excess / 1000 + 1) / rps + 1
  dict:set(key, ms, ttl, math.floor(excess))
  return true
end

--- true (and counted) when one more connection for `key` stays within `limit`.
function M.acquire(key, limit)
  local dict = M.dict
  local count = dict:incr(key, 1, 0, CONN_TTL)
  if count == nil then
    return true -- dict full: fail open, as a limit must not take a route down
  end
  if count > limit then
    dict:incr(key, -1)
    return false
  end
  return true
end

function M.release(key)
  M.dict:incr(key, -1)
end

return M
