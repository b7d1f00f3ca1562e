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

-- What the request adds to the cookie (ingress-nginx's attributes): the
-- clock and cookie date format for Expires, whether the request came over
-- TLS (Secure), its User-Agent (conditional SameSite=None). nginx's own
-- functions in nginx; nil in the specs unless a spec sets them.
local ngx = ngx
M.now = ngx and ngx.time
M.cookie_time = ngx and ngx.cookie_time
M.tls = ngx and ngx.var and function()
  return ngx.var.https == "on"
end
M.user_agent = ngx and ngx.var and function()
  return ngx.var.http_user_agent
end

local samesite = require("util.samesite")

--- The Set-Cookie header value giving the cookie `value`.
function M.format(options, value)
  options = options or {}
  local parts = { M.name(options) .. "=" .. value }
  parts[#parts + 1] = "Path=" .. ((options.path ~= nil and options.path ~= "") and options.path or "/")
  if options.domain ~= nil and options.domain ~= "" then
    parts[#parts + 1] = "Domain=" .. options.domain
  end
  if options.expires ~= nil and M.now ~= nil then
    parts[#parts + 1] = "Expires=" .. M.cookie_time(M.now() + options.expires)
  end
  if options.max_age ~= nil and options.max_age > 0 then
    parts[#parts + 1] = "Max-Age=" .. string.format("%d", options.max_age)
  end
  if options.samesite ~= nil and options.samesite ~= "" and not (options.samesite == "None"
      and options.conditional_samesite_none and M.user_agent ~= nil
      and not samesite.none_compatible(M.user_agent())) then
    parts[#parts + 1] = "SameSite=" .. options.samesite
  end
  -- Secure on https always (as ingress-nginx), on http when asked (session-cookie-secure).
  if options.secure or (M.tls ~= nil and M.tls()) then
    parts[#parts + 1] = "Secure"
  end
  parts[#parts + 1] = "HttpOnly"
  return table.concat(parts, "; ")
end

return M
