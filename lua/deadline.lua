--- Gateway API route timeouts per attempt, at millisecond precision
-- (platformd.ingress.deadline): a policy's "deadline" = {request_ms,
-- attempt_ms}. The route's lane sets, in its balancer phase (run once per
-- attempt), connect, send and read timeouts of min(attempt_ms, the time
-- left until start + request_ms); none left: 1 ms, so the attempt ends at
-- once with 504.
local ngx = ngx
local ms = require("util.nullable").value -- JSON null: none

local M = {}

local MAX_MS = 86400000

local function valid(value)
  return value == nil or (type(value) == "number" and value % 1 == 0 and value >= 1 and value <= MAX_MS)
end

--- Whether `value` is a policy's "deadline": true, or nil and a reason.
function M.check(value, path)
  if ms(value) == nil then
    return true
  end
  if type(value) ~= "table" then
    return nil, path .. ": must be an object"
  end
  local request, attempt = ms(value.request_ms), ms(value.attempt_ms)
  if not valid(request) or not valid(attempt) or (request == nil and attempt == nil) then
    return nil, path .. ": request_ms / attempt_ms must be milliseconds in [1, " .. MAX_MS .. "], one at least"
  end
  return true
end

--- A policy's "deadline" -> what `seconds` takes (nil for none).
function M.compile(value)
  if ms(value) == nil then
    return nil
  end
  return { request = ms(value.request_ms), attempt = ms(value.attempt_ms) }
end

--- This attempt's timeout in seconds (millisecond steps). `now` and
-- `start`: seconds (ngx.now(), ngx.req.start_time()).
function M.seconds(d, now, start)
  local limit = d.attempt
  if d.request ~= nil then
    local left = d.request - math.floor((now - start) * 1000 + 0.5)
    if limit == nil or left < limit then
      limit = left
    end
  end
  if limit < 1 then
    limit = 1
  end
  return limit / 1000
end

--- The attempt's timeouts for ngx.balancer.set_timeouts: connect, send, read.
function M.timeouts(d)
  ngx.update_time() -- a retry comes after a wait: the cached time may be old
  local t = M.seconds(d, ngx.now(), ngx.req.start_time())
  return t, t, t
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.check, M.compile, valid)

return M
