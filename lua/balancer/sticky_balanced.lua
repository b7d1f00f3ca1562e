--- Cookie affinity, "balanced" mode.
--
-- The cookie holds a random session key, not an endpoint. The endpoint is the
-- owner of that key on a consistent-hash ring (util/ring.lua) over the current
-- endpoints. Consequences, which are the point of this mode:
--   * a session sticks to one endpoint while the endpoint set is unchanged;
--   * when an endpoint goes, only its sessions move, each to a new endpoint
--     (the cookie itself stays valid, so no new Set-Cookie is needed);
--   * when endpoints are added, ~1/n of the sessions move to each new one,
--     so a scale-up actually receives traffic from existing sessions.
-- Compare sticky_persistent.lua, which never moves a session whose endpoint
-- still exists.
local ring = require("util.ring")
local cookie = require("util.cookie")

local M = {}
M.name = "sticky_balanced"

local mt = { __index = M }

-- 16 hex characters: 64 random bits are plenty to spread sessions evenly.
local SESSION_KEY = "^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$"

function M.new(backend, deps)
  local self = setmetatable({ random = deps.random }, mt)
  self:sync(backend)
  return self
end

function M:sync(backend)
  self.options = (backend.session_affinity or {}).cookie or {}
  self.ring = ring.new(backend.endpoints or {})
end

function M:new_session_key()
  local parts = {}
  for i = 1, 4 do
    parts[i] = string.format("%04x", self.random(65536) - 1)
  end
  return table.concat(parts)
end

function M:balance(request)
  local value = request.cookie(cookie.name(self.options))
  if value == nil or not value:match(SESSION_KEY) then
    value = self:new_session_key()
    local endpoint = self.ring:find(value)
    if endpoint then
      request.set_cookie(cookie.format(self.options, value))
    end
    return endpoint
  end
  return self.ring:find(value)
end

return M
