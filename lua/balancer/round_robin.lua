--- Round robin: endpoints in payload order, one after the other.
--
-- Each worker starts at a random offset so that N workers do not all send
-- their first request to the first endpoint. `sync` keeps the position, so an
-- endpoint change does not restart the rotation.
--
-- Interface shared by every module in lua/balancer/ (see lua/balancer.lua):
--   M.new(backend, deps) -> instance
--   instance:sync(backend)           the backend's endpoints or options changed
--   instance:balance(request) -> endpoint table or nil (no endpoints)
--   instance:after_balance(request)  optional, log phase
local M = {}
M.name = "round_robin"

local mt = { __index = M }

function M.new(backend, deps)
  local self = setmetatable({ random = deps.random, endpoints = {}, next = 1 }, mt)
  self:sync(backend)
  if #self.endpoints > 0 then
    self.next = self.random(#self.endpoints)
  end
  return self
end

function M:sync(backend)
  self.endpoints = backend.endpoints or {}
  if self.next > #self.endpoints then
    self.next = 1
  end
end

function M:balance()
  local endpoints = self.endpoints
  local n = #endpoints
  if n == 0 then
    return nil
  end
  local i = self.next
  if i > n then
    i = 1
  end
  self.next = i % n + 1
  return endpoints[i]
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.new, M.sync)

return M
