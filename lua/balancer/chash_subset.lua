--- Consistent hashing onto subsets of endpoints (upstream-hash-by-subset).
--
-- As ingress-nginx's chashsubset: the endpoints (in payload order, sorted by
-- the controller) are cut into ceil(n / size) subsets of `size`, the last
-- one topped up with endpoints from the start so every subset has `size`
-- members. The hash key (`upstream_hash_by`, as in chash.lua) picks a subset
-- on a ketama ring of subsets; a random member of it serves the request. So
-- a key's requests spread over `size` endpoints instead of one (no single
-- hot endpoint per key) while staying on few.
local ring = require("util.ring")
local chash = require("balancer.chash")

local M = {}
M.name = "chash_subset"

local mt = { __index = M }

M.DEFAULT_SIZE = 3

function M.subsets(endpoints, size)
  local list = {}
  for i, endpoint in ipairs(endpoints or {}) do
    list[i] = endpoint
  end
  local count = math.ceil(#list / size)
  for j = 1, count * size - #list do
    list[#list + 1] = list[j]
  end
  local subsets = {}
  for i = 1, count do
    local members = {}
    for k = 1, size do
      members[k] = list[(i - 1) * size + k]
    end
    -- A ring point per subset: its "endpoint key" is its position.
    subsets[i] = { address = "subset", port = i, members = members }
  end
  return subsets
end

function M.new(backend, deps)
  local self = setmetatable({ random = deps and deps.random or math.random }, mt)
  self:sync(backend)
  return self
end

function M:sync(backend)
  chash.sync_key(self, backend)
  local size = backend.upstream_hash_by_subset_size or M.DEFAULT_SIZE
  self.ring = ring.new(M.subsets(backend.endpoints, size))
end

M.key = chash.key

function M:balance(request)
  local subset = self.ring:find(self:key(request))
  if subset == nil then
    return nil
  end
  local members = subset.members
  return members[self.random(#members)]
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.subsets, M.new, M.sync)

return M
