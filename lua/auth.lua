--- Authentication of a route, per request, from the route policy's "auth"
-- entry (platformd.ingress.auth.payload): basic or digest users (lua/auth_basic.lua,
-- lua/auth_digest.lua), external auth (lua/auth_external.lua), and `satisfy`.
--
-- Called by router.route() in the lane's rewrite phase, where the allow/deny
-- check was: nginx's access phase order (allow/deny, then auth_basic, then
-- auth_request). `satisfy all` (the default) needs the source address
-- not refused *and* the credentials; `satisfy any` lets either suffice: an
-- address an allow list admits skips authentication, any other address
-- (denied, or one no list has an opinion of, as with a deny list alone)
-- must authenticate.
--
-- The payload holds credentials (hashes, HA1s): this module never logs them
-- or a request's Authorization header.
local M = {}

local value = require("util.nullable").value

---------------------------------------------------------------------------
-- Validation of a posted "auth" entry (util/schema.lua calls it): the
-- controller validated it already; this keeps a foreign or broken POST from
-- reaching the compiler. Pure; -> nil or the problem.
---------------------------------------------------------------------------

local SAFE = "^[%w%-%._~:/%?#%[%]@!&%(%)%*%+,=%%]*$" -- URL characters; no quotes, ';', spaces or '$'

local function url_problem(text, field)
  if type(text) ~= "string" then
    return field .. " must be a string"
  end
  -- Variables ($host, ${host}) are the controller's allowlist; here they
  -- only may not hide a quote or a brace.
  local plain = text:gsub("^%$%{?[%a_]+%}?://", "http://"):gsub("%$%{[%a_]+%}", "x"):gsub("%$[%a_]+", "x")
  if #text > 2048 or not plain:match("^https?://[%w%-%.%[%]:]+") or not plain:match(SAFE)
      or plain:find("@", 1, true) then
    return field .. " must be an http(s) URL without user info"
  end
end

local function list_of(t, pattern, field, null)
  if t == nil or t == null then
    return nil
  end
  if type(t) ~= "table" then
    return field .. " must be a list"
  end
  for _, item in ipairs(t) do
    if type(item) ~= "string" or not item:match(pattern) then
      return field .. " has a bad item"
    end
  end
end

function M.validate(raw, null)
  if type(raw) ~= "table" then
    return "must be an object"
  end
  if raw.satisfy ~= "any" and raw.satisfy ~= "all" then
    return "satisfy must be any or all"
  end
  local kind = raw.type
  if kind ~= nil and kind ~= null and kind ~= "basic" and kind ~= "digest" then
    return "type must be basic or digest"
  end
  if type(raw.realm) ~= "string" or #raw.realm > 256 or raw.realm:find('[^ -~]') or raw.realm:find('["\\]') then
    return "realm must be printable ASCII without quotes or backslashes"
  end
  local users = raw.users
  if kind == "basic" or kind == "digest" then
    if type(users) ~= "table" then
      return "users must be an object"
    end
    for name, hash in pairs(users) do
      if type(name) ~= "string" or name:find("[:%c]") or type(hash) ~= "string" or #hash > 512 then
        return "users has a bad entry"
      end
      if kind == "digest" and not hash:match("^%x+$") then
        return "users has a bad HA1"
      end
    end
  end
  local e = raw.external
  if e ~= nil and e ~= null then
    if type(e) ~= "table" then
      return "external must be an object"
    end
    local problem = url_problem(e.url, "external.url")
      or (e.signin ~= nil and e.signin ~= null and url_problem(e.signin, "external.signin"))
      or list_of(e.response_headers, "^[%w%-_]+$", "external.response_headers", null)
      or list_of(e.cache_key, "^[%w%$_%-%.:/]+$", "external.cache_key", null)
    if problem then
      return problem
    end
    if type(e.redirect_param) ~= "string" or not e.redirect_param:match("^[%w_%.%-]+$") then
      return "external.redirect_param must be a parameter name"
    end
    if type(e.cache_seconds) ~= "number" or e.cache_seconds < 0 or e.cache_seconds > 604800 then
      return "external.cache_seconds must be 0-604800"
    end
    for _, pair in ipairs(type(e.proxy_headers) == "table" and e.proxy_headers or {}) do
      if type(pair) ~= "table" or type(pair[1]) ~= "string" or not pair[1]:match("^[%w%-_]+$")
          or type(pair[2]) ~= "string" or pair[2]:find("[%c\\\"$;{}]") then
        return "external.proxy_headers has a bad header"
      end
    end
  end
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

--- Decides, per `satisfy`, what the address lists' verdict `address` means
-- ("denied"; "allowed": an allow list admits it; nil: no list has an
-- opinion, as nginx's access module declines when no rule matches, e.g. a
-- deny list alone): "pass" without authentication, "deny" (403), or "auth".
-- Pure.
function M.decide(satisfy, address)
  if satisfy == "any" then
    return address == "allowed" and "pass" or "auth"
  end
  return address == "denied" and "deny" or "auth"
end

--- Apply `a` (compiled) to the current request; returns only when it may
-- proceed (else the response is sent with ngx.exit / ngx.redirect).
function M.access(a, address)
  local decision = M.decide(a.satisfy, address)
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

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.validate, M.compile, url_problem, list_of)

return M
