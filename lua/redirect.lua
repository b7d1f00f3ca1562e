--- Gateway API RequestRedirect, answered per request.
--
-- The controller decides everything it can (platformd.ingress.bound
-- .redirect_payload): status, scheme, the port suffix (already the
-- listener's, "" for the scheme's well-known port), a fixed host name and
-- path. Per request this only fills in what the filter leaves to the request:
-- its host ($host: lower-case, without port), its path and query
-- ($request_uri as sent), or for ReplacePrefixMatch the rest of the
-- normalised path ($uri) after the matched prefix, with the query kept.
local sub = string.sub

local value = require("util.nullable").value

local M = {}

--- The raw payload (JSON nulls as `null`) -> the compiled redirect.
function M.compile(r)
  return { code = r.code, origin = r.scheme .. "://", hostname = value(r.hostname), port = r.port,
           path = value(r.path), prefix_length = value(r.prefix_length) }
end

--- The Location of `r` for a request (pure: the specs call it).
function M.location(r, host, request_uri, uri, args)
  local path = r.path
  if path == nil then
    path = request_uri
  else
    if r.prefix_length ~= nil then
      path = path .. sub(uri, r.prefix_length + 1)
      if path == "" then
        path = "/"
      end
    end
    if args ~= nil and args ~= "" then
      path = path .. "?" .. args
    end
  end
  return r.origin .. (r.hostname or host) .. r.port .. path
end

--- Answer this request with `r`.
function M.answer(r)
  local var = ngx.var
  return ngx.redirect(M.location(r, var.host, var.request_uri, var.uri, var.args), r.code)
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
