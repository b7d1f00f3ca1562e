--- Gateway wildcard host names on the shared ports, matched for one or more
-- labels (platformd.ingress.gateway_wildcards).
--
-- The shared table's "*.example.com" covers one label (an Ingress host, as
-- ingress-nginx has it); a Gateway listener's covers one or more, and
-- listener isolation needs that. The routes meta section carries the
-- Gateway's wildcard hosts again as "wildcards"; the router asks `find`
-- only after the exact name and the one-label wildcard both missed, so a
-- name the table has costs nothing more.
local find = string.find
local sub = string.sub

local M = {}

--- The raw "wildcards" object -> {["*.<domain>"] = compiled host}, or nil
-- when there is none. `compile_host(raw, policies)` is the router's.
function M.compile(raw, compile_host, policies, null)
  if raw == nil or raw == null or next(raw) == nil then
    return nil
  end
  local out = {}
  for name, host in pairs(raw) do
    out[name] = compile_host(host, policies)
  end
  return out
end

--- The host of the longest Gateway wildcard covering `name` with two or
-- more labels, or nil. `dot`: the position of `name`'s first dot (the
-- one-label wildcard "*" .. sub(name, dot) was already tried).
function M.find(wildcards, name, dot)
  dot = find(name, ".", dot + 1, true)
  while dot ~= nil do
    local host = wildcards["*" .. sub(name, dot)]
    if host ~= nil then
      return host
    end
    dot = find(name, ".", dot + 1, true)
  end
  return nil
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
