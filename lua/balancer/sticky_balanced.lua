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
--
-- Cookie value: "<16 hex session key>.<8 hex backend tag>", the tag being the
-- CRC-32 of the backend name. The tag lets `is_affinitized` tell this
-- backend's sessions from those of a canary using the same cookie name.
local ring = require("util.ring")
local cookie = require("util.cookie")
local crc32 = require("util.hash").crc32

local M = {}
M.name = "sticky_balanced"

local mt = { __index = M }

-- 64 random bits are plenty to spread sessions evenly.
local SESSION = "^(%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x)%.(%x%x%x%x%x%x%x%x)$"

function M.new(backend, deps)
  local self = setmetatable({ random = deps.random }, mt)
  self:sync(backend)
  return self
end

function M:sync(backend)
  self.options = (backend.session_affinity or {}).cookie or {}
  self.tag = string.format("%08x", crc32(backend.name))
  self.ring = ring.new(backend.endpoints or {})
end

function M:new_session_key()
  local parts = {}
  for i = 1, 4 do
    parts[i] = string.format("%04x", self.random(65536) - 1)
  end
  return table.concat(parts)
end

--- The session key of this backend's cookie in `request`, or nil.
function M:session(request)
  local value = request.cookie(cookie.name(self.options))
  local key, tag = (value or ""):match(SESSION)
  if tag ~= self.tag then
    return nil
  end
  return key
end

--- Whether the request belongs to a session of this backend (see canary.lua).
function M:is_affinitized(request)
  return self:session(request) ~= nil and #self.ring.points > 0
end

function M:balance(request)
  local key = self:session(request)
  if key == nil then
    key = self:new_session_key()
    local endpoint = self.ring:find(key)
    if endpoint then
      request.set_cookie(cookie.format(self.options, key .. "." .. self.tag))
    end
    return endpoint
  end
  return self.ring:find(key)
end

--- The Set-Cookie value of a new session the ring gives to `endpoint`
-- (session-cookie-change-on-failure), or nil: keys are random, so a few
-- draws find one (1/n of them land on each of n endpoints).
function M:cookie_for(endpoint)
  for _ = 1, 64 * math.max(#self.ring.points, 1) do
    local key = self:new_session_key()
    local owner = self.ring:find(key)
    if owner == nil then
      return nil
    end
    if owner.address == endpoint.address and owner.port == endpoint.port then
      return cookie.format(self.options, key .. "." .. self.tag)
    end
  end
  return nil
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.new, M.sync)

return M
