--- External authentication (auth-url and companions, or the ConfigMap's
-- global-auth-*), as ingress-nginx's auth_request does it:
--
-- a subrequest (ngx.location.capture) to the fixed internal location
-- `/_platform_auth` (templates/nginx.conf.j2), which proxies to the URL in
-- $platform_auth_url with the client's headers but never its body, plus
-- X-Original-URL, X-Original-Method, X-Auth-Request-Redirect, X-Sent-From;
-- `internal`, so it cannot be requested from outside.
--   2xx      -> the request proceeds; each auth-response-headers header of
--               the auth answer replaces the client's (absent: removed, so
--               a client cannot forge X-Auth-Request-User); its Set-Cookie
--               is added to the response (on 2xx/3xx answers, or always
--               with auth-always-set-cookie).
--   401      -> 401, or a 302 to auth-signin with the original URL in the
--               auth-signin-redirect-param ("rd") parameter;
--   403      -> 403;
--   anything else (5xx, unreachable, a timeout) -> 500: never open.
-- auth-cache-key + auth-cache-duration: answers with a listed status are
-- kept in the platform_auth shared dict for the duration, keyed by
-- md5(URL, method, the key's expansion); a hit makes no subrequest.
-- auth-proxy-set-headers: set on the subrequest only (restored after).
-- auth-method: the subrequest's method (no body either way).
local M = {}

local ngx = ngx
local cjson = ngx and require("cjson.safe")

local METHODS = ngx and {
  GET = ngx.HTTP_GET, HEAD = ngx.HTTP_HEAD, POST = ngx.HTTP_POST, PUT = ngx.HTTP_PUT,
  PATCH = ngx.HTTP_PATCH, DELETE = ngx.HTTP_DELETE, OPTIONS = ngx.HTTP_OPTIONS,
} or {}

local value = require("util.nullable").value

---------------------------------------------------------------------------
-- Pure parts (tests/lua/auth_external_spec.lua)
---------------------------------------------------------------------------

--- The host[:port] of an http(s) URL (the Host header the auth service gets).
function M.host_of(url)
  return url:match("^https?://([^/?]+)")
end

--- auth-signin with the original URL in `param`, unless the sign-in URL
-- has that parameter already (as ingress-nginx adds it).
function M.signin_location(signin, param, original, escape)
  if signin:find("[?&]" .. param:gsub("%p", "%%%0") .. "=") then
    return signin
  end
  local sep = signin:find("?", 1, true) and "&" or "?"
  return signin .. sep .. param .. "=" .. escape(original)
end

--- "https://$host/x?rd=${escaped_request_uri}" -> {"https://", "$host", "/x?rd=",
-- "$escaped_request_uri"} (nil without variables): the parts `expand` reads.
function M.template(text)
  if not text:find("$", 1, true) then
    return nil
  end
  local parts = {}
  local pos = 1
  while true do
    local from, to, name = text:find("%$%{?([%a_]+)%}?", pos)
    if from == nil then
      break
    end
    if from > pos then
      parts[#parts + 1] = text:sub(pos, from - 1)
    end
    parts[#parts + 1] = "$" .. name
    pos = to + 1
  end
  if pos <= #text then
    parts[#parts + 1] = text:sub(pos)
  end
  return parts
end

--- Whether `status` is cached under `codes` (0 = any status).
function M.cacheable(codes, status)
  for _, code in ipairs(codes) do
    if code == 0 or code == status then
      return true
    end
  end
  return false
end

--- The cache key's expansion: literal parts as they are, "$name" parts read
-- with `var(name)` (an unset variable expands to "").
function M.expand(parts, var)
  local out = {}
  for i, part in ipairs(parts) do
    if part:sub(1, 1) == "$" then
      out[i] = var(part:sub(2)) or ""
    else
      out[i] = part
    end
  end
  return table.concat(out)
end

function M.compile(raw)
  local signin = value(raw.signin)
  return {
    url = raw.url,
    url_parts = M.template(raw.url),
    signin_parts = signin and M.template(signin),
    host = M.host_of(raw.url),
    method = METHODS[raw.method] or (ngx and ngx.HTTP_GET),
    method_name = raw.method,
    signin = signin,
    redirect_param = raw.redirect_param or "rd",
    response_headers = raw.response_headers or {},
    request_redirect = value(raw.request_redirect),
    proxy_headers = raw.proxy_headers or {},
    cache_key = (raw.cache_key and raw.cache_key[1] ~= nil) and raw.cache_key or nil,
    cache_codes = raw.cache_codes or {},
    cache_seconds = raw.cache_seconds or 0,
    always_set_cookie = raw.always_set_cookie == true,
  }
end

---------------------------------------------------------------------------
-- nginx glue
---------------------------------------------------------------------------

local function var(name)
  if name == "escaped_request_uri" then -- ingress-nginx's: the request URI, escaped for a query
    return ngx.escape_uri(ngx.var.request_uri)
  end
  return ngx.var[name]
end

-- The auth URL of this request: as written, or with its variables read.
local function url_of(e)
  if e.url_parts == nil then
    return e.url, e.host
  end
  local url = M.expand(e.url_parts, var)
  return url, M.host_of(url)
end

-- The subrequest; -> status, headers ({name = value} of the headers kept).
local function ask(e)
  local saved
  local n = #e.proxy_headers
  if n > 0 then
    saved = {}
    local current = ngx.req.get_headers(100)
    for i = 1, n do
      local name, text = e.proxy_headers[i][1], e.proxy_headers[i][2]
      saved[i] = current[name] or false
      ngx.req.set_header(name, text)
    end
  end
  local original = ngx.var.scheme .. "://" .. (ngx.var.http_host or ngx.var.host) .. ngx.var.request_uri
  local url, host = url_of(e)
  local res = ngx.location.capture("/_platform_auth", {
    method = e.method,
    always_forward_body = false,
    vars = {
      platform_auth_url = url,
      platform_auth_host = host,
      platform_auth_original_url = original,
      platform_auth_original_method = ngx.req.get_method(),
      platform_auth_redirect = e.request_redirect or ngx.var.request_uri,
    },
  })
  if saved ~= nil then
    for i = 1, n do
      ngx.req.set_header(e.proxy_headers[i][1], saved[i] or nil)
    end
  end
  if res == nil then
    return 500, {}
  end
  local kept = {}
  for _, name in ipairs(e.response_headers) do
    local h = res.header[name]
    if type(h) == "table" then
      h = table.concat(h, ", ")
    end
    kept[name] = h
  end
  local cookie = res.header["Set-Cookie"]
  if type(cookie) == "table" then
    cookie = cookie[1] -- one header through one variable (add_header)
  end
  kept["\0cookie"] = cookie
  if res.status == 401 then
    kept["\0challenge"] = res.header["WWW-Authenticate"] -- passed on, as auth_request does
  end
  return res.status, kept
end

local function cached(e)
  local key = ngx.md5(url_of(e) .. "\0" .. e.method_name .. "\0" .. M.expand(e.cache_key, var))
  local dict = ngx.shared.platform_auth
  local hit = dict:get("ea:" .. key)
  if hit ~= nil then
    local entry = cjson.decode(hit)
    if entry ~= nil then
      return entry.s, entry.h
    end
  end
  local status, headers = ask(e)
  if M.cacheable(e.cache_codes, status) then
    dict:set("ea:" .. key, cjson.encode({ s = status, h = headers }), e.cache_seconds)
  end
  return status, headers
end

--- Apply external auth `e` (compiled) to the current request.
function M.access(e)
  local status, headers
  if e.cache_key ~= nil then
    status, headers = cached(e)
  else
    status, headers = ask(e)
  end
  local cookie = headers["\0cookie"]
  if status >= 200 and status < 300 then
    for _, name in ipairs(e.response_headers) do
      ngx.req.set_header(name, headers[name]) -- nil removes a client's own
    end
    if cookie ~= nil then
      if e.always_set_cookie then
        ngx.var.platform_auth_cookie_always = cookie
      else
        ngx.var.platform_auth_cookie = cookie
      end
    end
    return
  end
  if cookie ~= nil and e.always_set_cookie then
    ngx.header["Set-Cookie"] = cookie
  end
  if status == 401 then
    if e.signin ~= nil then
      local original = ngx.var.scheme .. "://" .. (ngx.var.http_host or ngx.var.host) .. ngx.var.request_uri
      local signin = e.signin_parts and M.expand(e.signin_parts, var) or e.signin
      return ngx.redirect(M.signin_location(signin, e.redirect_param, original, ngx.escape_uri), 302)
    end
    local challenge = headers["\0challenge"]
    if challenge ~= nil then
      ngx.header["WWW-Authenticate"] = challenge
    end
    return ngx.exit(401)
  end
  if status == 403 then
    return ngx.exit(403)
  end
  ngx.log(ngx.ERR, "external auth ", e.url, " answered ", status, "; refusing the request (500)")
  return ngx.exit(500)
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
