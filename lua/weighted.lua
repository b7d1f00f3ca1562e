--- Weighted backends of a Gateway API rule: each request goes to one of the
-- rule's backends with probability weight / total.
--
-- Data (platformd.ingress.route_choice): `split` = {{name | null, weight}, ...}
-- with positive weights (the controller leaves weight 0 out). A null name
-- is an invalid backendRef's share: `pick` returns nil and the router
-- answers 500 for it, as the Gateway API asks. Unlike canary.lua (one
-- alternative beside a primary, chosen by header/cookie first) this is a
-- plain n-way split; both draw from the injected random(n) -> 1..n.
local M = {}

local null = ngx and require("cjson.safe").null

--- `split` as posted -> {names = {name | false}, bounds = {cumulative weight}, total}.
function M.compile(split)
  local names, bounds, total = {}, {}, 0
  for i, item in ipairs(split) do
    local name = item[1]
    if name == null or name == nil then
      name = false
    end
    total = total + item[2]
    names[i], bounds[i] = name, total
  end
  return { names = names, bounds = bounds, total = total }
end

--- The backend name for one request, or nil (an invalid share: 500).
-- `random(n)` -> an integer in [1, n] (math.random by default).
function M.pick(w, random)
  local r = (random or math.random)(w.total)
  local bounds = w.bounds
  for i = 1, #bounds do
    if r <= bounds[i] then
      return w.names[i] or nil
    end
  end
  return nil
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
