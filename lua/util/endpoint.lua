--- Endpoint identity shared by all balancers.
--
-- An endpoint is the plain table from the `backends` payload:
-- `{address = "10.1.0.5", port = 8080}`. Its key `"10.1.0.5:8080"` is how
-- balancers, retries and the EWMA statistics name it; IPv6 addresses are
-- bracketed so the key stays unambiguous.
local M = {}

function M.key(endpoint)
  local address = endpoint.address
  if address:find(":", 1, true) then
    return "[" .. address .. "]:" .. endpoint.port
  end
  return address .. ":" .. endpoint.port
end

return M
