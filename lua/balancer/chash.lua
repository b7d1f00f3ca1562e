--- Consistent hashing on an nginx variable (`upstream_hash_by`).
--
-- The hash key is `upstream_hash_by` with every `$name` replaced by the value
-- of that nginx variable (missing variables count as ""), e.g. "$request_uri"
-- or "$host$uri". The key is looked up on a ketama ring (util/ring.lua), so
-- one endpoint leaving moves only the keys it owned.
local ring = require("util.ring")

local M = {}
M.name = "chash"

local mt = { __index = M }

--- Split "$host-$uri" into {{var="host"}, "-", {var="uri"}}.
-- The template was validated at configuration time (util/schema.lua).
function M.parse_key_template(template)
  local parts = {}
  local pos = 1
  while pos <= #template do
    local s, e, name = template:find("%$([%w_]+)", pos)
    if not s then
      parts[#parts + 1] = template:sub(pos)
      break
    end
    if s > pos then
      parts[#parts + 1] = template:sub(pos, s - 1)
    end
    parts[#parts + 1] = { var = name }
    pos = e + 1
  end
  return parts
end

function M.new(backend)
  local self = setmetatable({}, mt)
  self:sync(backend)
  return self
end

--- Keeps `self.key_parts` in step with the backend's upstream-hash-by
-- (parsed again only when it changes); shared with balancer.chash_subset.
function M.sync_key(self, backend)
  if backend.upstream_hash_by ~= self.hash_by then
    self.hash_by = backend.upstream_hash_by
    self.key_parts = M.parse_key_template(self.hash_by or "")
  end
end

function M:sync(backend)
  M.sync_key(self, backend)
  self.ring = ring.new(backend.endpoints or {})
end

function M:key(request)
  local out = {}
  for i, part in ipairs(self.key_parts) do
    if type(part) == "table" then
      out[i] = request.var(part.var) or ""
    else
      out[i] = part
    end
  end
  return table.concat(out)
end

function M:balance(request)
  return self.ring:find(self:key(request))
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.parse_key_template, M.new, M.sync_key, M.sync)

return M
