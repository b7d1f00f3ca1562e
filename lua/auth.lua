--- Authentication of a route, per request, from the route policy's "auth"
-- entry (platformd.ingress.auth.payload): basic or digest users (lua/auth_basic.lua,
-- lua/auth_digest.lua), external auth (lua/auth_external.lua), and `satisfy`.
--
-- Called by router.route() in the lane's rewrite phase, where the allow/deny
-- check was: nginx's access phase order (allow/deny, then auth_basic, then
-- auth_request). `satisfy all` (the default) needs the source address
-- allowed *and* the credentials; `satisfy any` lets either suffice (an
-- address the allow list admits skips authentication; any other address
-- must authenticate; without an allow/deny list there is nothing else that
-- could suffice, so authentication is required).
--
-- The payload holds credentials (hashes, HA1s): this module never logs them
-- or a request's Authorization header.
local M = {}

local null = ngx and require("cjson.safe").null

local function value(x)
  if x == null then
    return nil
  end
  return x
end

--- The policy's raw "auth" entry -> the compiled auth (or nil).
function M.compile(raw)
  raw = value(raw)
  if raw == nil then
    return nil
  end
  local compiled = { satisfy = raw.satisfy, realm = raw.realm or "" }
  local kind = value(raw.type)
  if kind == "basic" then
    compiled.basic = require("auth_basic").compile(value(raw.users) or {}, compiled.realm)
  elseif kind == "digest" then
    compiled.digest = require("auth_digest").compile(value(raw.users) or {}, compiled.realm)
  end
  local external = value(raw.external)
  if external ~= nil then
    compiled.external = require("auth_external").compile(external)
  end
  return compiled
end

--- What the local credentials say: true (pass) or a function sending the
-- failure (401 and its challenge).
local function local_check(a)
  if a.basic ~= nil then
    return require("auth_basic").check(a.basic)
  end
  if a.digest ~= nil then
    return require("auth_digest").check(a.digest)
  end
  return true
end

--- Decides, per `satisfy`, whether `address_denied` (nil: the route has no
-- allow/deny list) lets the request through without authentication, must
-- be refused (403), or must authenticate. Pure: "pass", "deny", "auth".
function M.decide(satisfy, address_denied)
  if address_denied == nil then
    return "auth"
  end
  if satisfy == "any" then
    return address_denied and "auth" or "pass"
  end
  return address_denied and "deny" or "auth"
end

--- Apply `a` (compiled) to the current request; returns only when it may
-- proceed (else the response is sent with ngx.exit / ngx.redirect).
function M.access(a, address_denied)
  local decision = M.decide(a.satisfy, address_denied)
  if decision == "pass" then
    return
  end
  if decision == "deny" then
    return ngx.exit(ngx.HTTP_FORBIDDEN)
  end
  local ok = local_check(a)
  if ok ~= true then
    return ok()
  end
  if a.external ~= nil then
    return require("auth_external").access(a.external)
  end
end

return M
