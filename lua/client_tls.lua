--- Client certificates (ingress-nginx's auth-tls-*), as data from
-- platformd.ingress.client_tls.
--
-- Three steps, each where nginx lets it happen:
--   client_hello(name)  ClientHello (lua/certificate.lua): for an SNI name
--                      whose host asks for client certificates, the policy
--                      id goes into the session id context, so a session (id
--                      or ticket) made under one CA is never resumed under
--                      another: OpenSSL refuses resumption across contexts.
--   call()             ssl_certificate_by_lua (full handshakes only; the
--                      only phase ngx.ssl.verify_client accepts in
--                      lua-nginx-module 0.10.23): request a certificate and
--                      verify it against the name's CA bundle and depth.
--                      nginx's own verify callback never aborts the
--                      handshake; the result is $ssl_client_verify.
--   check(ct, ...)     the router's first step for a host with a policy:
--                      the mode against $ssl_client_verify, 421 when the
--                      connection was verified for another policy (HTTP/2
--                      reuses a connection for any host its certificate
--                      covers), match-cn, and the ssl-client-* headers.
--
-- The data is the "routes" section's client_tls ({names = {name = id},
-- cas = {id = {pem, depth}}}); a worker re-reads it when that section's
-- version moves, and parses each CA bundle once.
local ngx = ngx
local M = {}

local tls = require("util.sni_table").new("client_tls", "cas")
local chains = {} -- id -> parsed CA chain (cdata), for tls.version

local function refresh()
  if tls:refresh() then
    chains = {}
  end
end

--- The policy id the TLS server name `name` is verified with, or nil (pure
-- given the loaded data; exposed for the router and the specs).
function M.id_for(name)
  return tls:key_for(name)
end

--- For specs: load `data` as if it came from the "routes" section.
function M.load(data)
  tls:load(data, -2)
  chains = {}
end

--- ClientHello: the policy id of the SNI name `name` (nil: none), which
-- lua/certificate.lua makes part of the connection's session id context.
function M.client_hello(name)
  refresh()
  if not tls.any then
    return nil
  end
  return tls:key_for(name)
end

local function chain(id)
  local parsed = chains[id]
  if parsed == nil then
    local ca = tls.entries[id]
    if ca == nil then
      return nil, "no CA for policy " .. tostring(id)
    end
    local err
    parsed, err = require("ngx.ssl").parse_pem_cert(ca.pem)
    if parsed == nil then
      return nil, err
    end
    chains[id] = parsed
  end
  return parsed, tls.entries[id].depth
end

--- ssl_certificate_by_lua: ask for and verify a client certificate.
function M.call()
  refresh()
  if not tls.any then
    return
  end
  local ssl = require("ngx.ssl")
  local name = ssl.server_name()
  local id = M.id_for(name)
  if id == nil then
    return
  end
  local ca, depth = chain(id)
  local ok, err = false, depth
  if ca ~= nil then
    ok, err = ssl.verify_client(ca, depth)
  end
  if not ok then
    -- Never a handshake that skips the check the host asks for.
    ngx.log(ngx.ERR, "client_tls: cannot verify client certificates for ", tostring(name), ": ", tostring(err))
    return ngx.exit(ngx.ERROR)
  end
end

-- nginx's own answers for these (ngx_http_special_response.c), status 400.
local NO_CERT = "<html>\r\n<head><title>400 No required SSL certificate was sent</title></head>\r\n"
  .. "<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n"
  .. "<center>No required SSL certificate was sent</center>\r\n</body>\r\n</html>\r\n"
local CERT_ERROR = "<html>\r\n<head><title>400 The SSL certificate error</title></head>\r\n"
  .. "<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n"
  .. "<center>The SSL certificate error</center>\r\n</body>\r\n</html>\r\n"

-- What optional_no_ca lets through (nginx's ngx_ssl_verify_error_optional):
-- a chain the CA does not complete, nothing else (an expired certificate is
-- still refused).
local OPTIONAL_ERRORS = {
  "self.signed certificate", "unable to get issuer certificate", "unable to get local issuer certificate",
  "unable to verify the first certificate",
}

local function optional_error(verify)
  for _, text in ipairs(OPTIONAL_ERRORS) do
    if verify:find(text) then
      return true
    end
  end
  return false
end

--- The verdict for `verify` ($ssl_client_verify) under `mode`: nil (pass),
-- "no_cert" or "cert_error" (both 400, or the error page). Pure.
function M.verdict(mode, verify)
  if verify == nil or verify == "" then
    verify = "NONE"
  end
  if verify == "NONE" then
    return mode == "on" and "no_cert" or nil
  end
  if verify == "SUCCESS" then
    return nil
  end
  if mode == "optional_no_ca" and optional_error(verify) then
    return nil
  end
  return "cert_error"
end

local function refuse(ct, kind)
  if ct.error_page ~= "" then
    return ngx.redirect(ct.error_page, ngx.HTTP_MOVED_TEMPORARILY)
  end
  ngx.status = 400
  ngx.header["Content-Type"] = "text/html"
  ngx.print(kind == "no_cert" and NO_CERT or CERT_ERROR)
  return ngx.exit(400)
end

local set_header = ngx and ngx.req.set_header

--- The router's step for a host with policy `ct` (its host entry's
-- client_tls). `redirected`: a plain-HTTP request the route sends to https
-- anyway (no certificate to check before that).
function M.check(ct, redirected)
  local var = ngx.var
  local verify = "NONE"
  if var.https == "on" then
    refresh()
    if M.id_for(var.ssl_server_name) ~= ct.id then
      -- The connection's handshake verified (or skipped) another policy.
      ngx.status = 421
      return ngx.exit(421)
    end
    verify = var.ssl_client_verify or "NONE"
  elseif redirected then
    return
  end
  local verdict = M.verdict(ct.verify, verify)
  if verdict ~= nil then
    return refuse(ct, verdict)
  end
  local subject = verify ~= "NONE" and var.ssl_client_s_dn or nil
  if ct.match_cn ~= "" and not ngx.re.find(subject or "", ct.match_cn, "jo") then
    ngx.status = 403
    ngx.header["Content-Type"] = "text/plain"
    ngx.print("client certificate unauthorized")
    return ngx.exit(403)
  end
  -- What the upstream learns, as ingress-nginx sends it; a client's own
  -- headers of these names are replaced or removed, never passed on.
  set_header("ssl-client-verify", verify)
  set_header("ssl-client-subject-dn", subject)
  set_header("ssl-client-issuer-dn", verify ~= "NONE" and var.ssl_client_i_dn or nil)
  set_header("ssl-client-cert", ct.pass_certificate and verify ~= "NONE" and var.ssl_client_escaped_cert or nil)
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.load)

return M
