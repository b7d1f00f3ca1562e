--- Which certificate serves a TLS server name.
--
-- Order: the exact name; then the wildcard one level up ("a.example.com" ->
-- "*.example.com", as a TLS wildcard covers exactly one label); then the
-- default. Names compare case-insensitively; a trailing dot is ignored.
local M = {}

--- `servers`: {host = cert id} with lower-case keys; returns a cert id or nil.
function M.lookup(servers, default, server_name)
  if server_name == nil or server_name == "" then
    return default
  end
  local name = server_name:lower():gsub("%.$", "")
  local id = servers[name]
  if id then
    return id
  end
  local parent = name:match("^[^%.]+%.(.+%..+)$")
  if parent then
    id = servers["*." .. parent]
    if id then
      return id
    end
  end
  return default
end

return M
