--- Formatting of the sticky-session cookie.
--
-- `options` is the validated `session_affinity.cookie` object:
-- `{name, max_age, path, samesite, secure}`. Values were checked at
-- configuration time (see util/schema.lua), so they can be written verbatim.
-- The cookie is always HttpOnly: it only routes, scripts have no use for it.
local M = {}

M.DEFAULT_NAME = "route"

function M.name(options)
  local name = options and options.name
  if name == nil or name == "" then
    return M.DEFAULT_NAME
  end
  return name
end

--- The Set-Cookie header value giving the cookie `value`.
function M.format(options, value)
  options = options or {}
  local parts = { M.name(options) .. "=" .. value }
  parts[#parts + 1] = "Path=" .. ((options.path ~= nil and options.path ~= "") and options.path or "/")
  if options.max_age ~= nil and options.max_age > 0 then
    parts[#parts + 1] = "Max-Age=" .. string.format("%d", options.max_age)
  end
  if options.samesite ~= nil and options.samesite ~= "" then
    parts[#parts + 1] = "SameSite=" .. options.samesite
  end
  if options.secure then
    parts[#parts + 1] = "Secure"
  end
  parts[#parts + 1] = "HttpOnly"
  return table.concat(parts, "; ")
end

return M
