--- Certificate selection in `ssl_client_hello_by_lua_block` (of the default
-- https server only; also works in `ssl_certificate_by_lua_block`).
--
-- Why ClientHello: the named servers have no TLS context of their own (one
-- per server made `nginx -t` take minutes at 10,000 hosts), and
-- `ssl_certificate_by_lua` runs in the server SNI selected, which cannot have
-- the hook without a context. At ClientHello nginx has not switched servers
-- yet; the name comes from the ClientHello itself.
--
-- Each handshake: compare the certificates version in the shared dict with
-- the one this worker loaded (one dict read); on change, reload the host ->
-- certificate id map and empty the parsed-certificate cache. Then pick the id
-- for the SNI name (util/sni.lua: exact, wildcard, default), parse its PEM
-- once per worker and version (cdata cached by id), and install it.
-- With no id (no match and no default) or a broken PEM we leave the
-- `ssl_certificate` of the default server in place.
local ssl = require("ngx.ssl")
local configuration = require("configuration")
local sni = require("util.sni")
local client_tls = require("client_tls")
local host_tls = require("host_tls")
local ssl_conn = require("util.ssl_conn")

local M = {}

local loaded_version = -1
local servers, default_id = {}, nil
local pem_of = function() return nil end
-- cert id -> {cert = cdata, key = cdata}; replaced whole on a version change.
local cache = {}

local function refresh()
  if configuration.version("certificates") == loaded_version then
    return
  end
  local version, data, pem = configuration.certificates()
  servers, default_id, pem_of = data.servers or {}, data.default, pem
  cache = {}
  loaded_version = version
end

local function parsed(id)
  local entry = cache[id]
  if entry then
    return entry
  end
  local pem = pem_of(id)
  if pem == nil then
    -- A newer version replaced this one between our two reads.
    loaded_version = -1
    refresh()
    pem = pem_of(id)
    if pem == nil then
      return nil, "certificate " .. id .. " is not stored"
    end
  end
  local cert, err = ssl.parse_pem_cert(pem)
  if not cert then
    return nil, err
  end
  local key
  key, err = ssl.parse_pem_priv_key(pem)
  if not key then
    return nil, err
  end
  entry = { cert = cert, key = key }
  cache[id] = entry
  return entry
end

--- Per-host settings of the one TLS context, for the SNI name: cipher list
-- and preference (host_tls), and a session id context naming the host's
-- client-certificate policy and ciphers, so that no session is resumed under
-- other settings than it was made with (client_tls; OpenSSL checks it).
-- A host whose settings cannot be applied gets no handshake at all.
function M.host_settings(name)
  local client_id = client_tls.client_hello(name)
  local wants_host = host_tls.wanted(name)
  if client_id == nil and not wants_host then
    return
  end
  local conn, err = ssl_conn.pointer()
  local key = ""
  if conn and wants_host then
    key, err = host_tls.client_hello(name, conn)
  end
  if not conn or not key or not ssl_conn.set_session_context(conn, "p" .. (client_id or "") .. "/" .. key) then
    ngx.log(ngx.ERR, "TLS settings for ", tostring(name), ": ", tostring(err or "session context refused"))
    return ngx.exit(ngx.ERROR)
  end
end

function M.call()
  refresh()
  local name
  if ngx.get_phase() == "ssl_client_hello" then
    name = require("ngx.ssl.clienthello").get_client_hello_server_name()
  else
    name = ssl.server_name()
  end
  if ngx.get_phase() == "ssl_client_hello" then
    M.host_settings(name)
  end
  local id = sni.lookup(servers, default_id, name)
  if id == nil then
    return
  end
  local entry, err = parsed(id)
  if not entry then
    ngx.log(ngx.ERR, "certificate ", id, " for ", tostring(name), ": ", err)
    return
  end
  local ok
  ok, err = ssl.clear_certs()
  if ok then
    ok, err = ssl.set_cert(entry.cert)
  end
  if ok then
    ok, err = ssl.set_priv_key(entry.key)
  end
  if not ok then
    ngx.log(ngx.ERR, "installing certificate ", id, ": ", err)
    return ngx.exit(ngx.ERROR)
  end
end

return M
