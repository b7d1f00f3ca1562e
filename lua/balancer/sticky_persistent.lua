--- Cookie affinity, "persistent" mode.
--
-- The cookie names the endpoint itself (an opaque digest of "address:port",
-- util/hash.lua, so internal addresses are not exposed). A session stays on
-- its endpoint for as long as that endpoint exists, even when endpoints are
-- added. A request without a cookie, or whose endpoint has gone, gets a new
-- endpoint by round robin and a new cookie.
local cookie = require("util.cookie")
local digest = require("util.hash").digest
local endpoint_key = require("util.endpoint").key
local round_robin = require("balancer.round_robin")

local M = {}
M.name = "sticky_persistent"

local mt = { __index = M }

function M.new(backend, deps)
  local self = setmetatable({ fallback = round_robin.new(backend, deps) }, mt)
  self:sync(backend)
  return self
end

function M:sync(backend)
  self.options = (backend.session_affinity or {}).cookie or {}
  self.fallback:sync(backend)
  local by_digest = {}
  for _, endpoint in ipairs(backend.endpoints or {}) do
    by_digest[digest(endpoint_key(endpoint))] = endpoint
  end
  self.by_digest = by_digest
end

--- Whether the request belongs to a session of this backend (see canary.lua).
function M:is_affinitized(request)
  local value = request.cookie(cookie.name(self.options))
  return value ~= nil and self.by_digest[value] ~= nil
end

function M:balance(request)
  local value = request.cookie(cookie.name(self.options))
  local endpoint = value and self.by_digest[value]
  if endpoint then
    return endpoint
  end
  endpoint = self.fallback:balance(request)
  if endpoint then
    request.set_cookie(cookie.format(self.options, digest(endpoint_key(endpoint))))
  end
  return endpoint
end

--- The Set-Cookie value pinning a session to `endpoint` (session-cookie-change-on-failure).
function M:cookie_for(endpoint)
  return cookie.format(self.options, digest(endpoint_key(endpoint)))
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.new, M.sync)

return M
