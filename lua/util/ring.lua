--- Consistent-hash ring (ketama style) over a list of endpoints.
--
-- Each endpoint is placed on a 32-bit ring at VNODES points,
-- `crc32("<endpoint key>#<i>")`. A key maps to the first point clockwise from
-- `crc32(key)`. Because point positions depend only on the endpoint's own key,
-- removing an endpoint moves exactly the keys that mapped to it and adding one
-- takes roughly 1/n of the keys from the others; nothing else moves.
--
-- VNODES = 160 follows ketama: with 160 points per endpoint the share of each
-- endpoint stays within a few percent of 1/n for small n, and building the ring
-- for 100 endpoints (16,000 points) costs a few milliseconds once per change.
--
-- A ring is immutable once built; rebuild it when the endpoint set changes.
local hash = require("util.hash")
local endpoint_key = require("util.endpoint").key

local M = {}
M.VNODES = 160

local mt = { __index = M }

--- Build a ring. `endpoints` is a list of endpoint tables; `vnodes` optional.
function M.new(endpoints, vnodes)
  vnodes = vnodes or M.VNODES
  local points = {}
  for _, endpoint in ipairs(endpoints) do
    local key = endpoint_key(endpoint)
    for i = 1, vnodes do
      points[#points + 1] = { hash.crc32(key .. "#" .. i), key, endpoint }
    end
  end
  -- Ties (two endpoints on the same point) are broken by key so that every
  -- worker, whatever the payload order, builds the same ring.
  table.sort(points, function(a, b)
    if a[1] ~= b[1] then
      return a[1] < b[1]
    end
    return a[2] < b[2]
  end)
  return setmetatable({ points = points }, mt)
end

--- The endpoint owning `key` (a string), or nil when the ring is empty.
function M:find(key)
  local points = self.points
  local n = #points
  if n == 0 then
    return nil
  end
  local h = hash.crc32(key)
  -- Binary search for the first point with position >= h.
  local lo, hi = 1, n
  if points[n][1] < h then
    return points[1][3]
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if points[mid][1] < h then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return points[lo][3]
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.new)

return M
