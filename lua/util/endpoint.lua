--- Endpoint identity shared by all balancers.
--
-- An endpoint is the plain table from the `backends` payload:
-- `{address = "10.1.0.5", port = 8080}`. Its key `"10.1.0.5:8080"` is how
-- balancers, retries and the EWMA statistics name it; IPv6 addresses are
-- bracketed so the key stays unambiguous (the form nginx prints in
-- $upstream_addr).
--
-- Keys are asked for on every request of some algorithms (EWMA scores two
-- endpoints per pick), so each endpoint table's key is built once and
-- remembered; the cache holds its tables weakly, so the endpoints of an old
-- configuration version are collected as usual.
local M = {}

local cache = setmetatable({}, { __mode = "k" })

local function build(endpoint)
  local address = endpoint.address
  if address:find(":", 1, true) then
    return "[" .. address .. "]:" .. endpoint.port
  end
  return address .. ":" .. endpoint.port
end

function M.key(endpoint)
  local key = cache[endpoint]
  if key == nil then
    key = build(endpoint)
    cache[endpoint] = key
  end
  return key
end

return M
