--- Per-host TLS settings (ssl-ciphers, ssl-prefer-server-ciphers), as data
-- from platformd.ingress.host_tls: applied at ClientHello on the
-- connection's SSL* for the SNI name (lua/certificate.lua calls us), before
-- OpenSSL chooses a cipher. The data is the "routes" section's host_tls
-- ({names = {name = key}, settings = {key = {ciphers, prefer}}}).
local sni = require("util.sni")
local ssl_conn = require("util.ssl_conn")

local M = {}

local loaded_version = -1
local names, settings = {}, {}
local any = false

local function refresh()
  local configuration = require("configuration")
  local version = configuration.version("routes")
  if version == loaded_version then
    return
  end
  local _, meta = configuration.routes("routes")
  local data = meta and meta.host_tls
  if type(data) == "table" then
    names, settings = data.names or {}, data.settings or {}
  else
    names, settings = {}, {}
  end
  any = next(names) ~= nil
  loaded_version = version
end

--- For specs: load `data` as if it came from the "routes" section.
function M.load(data)
  names, settings = data.names or {}, data.settings or {}
  any = next(names) ~= nil
  loaded_version = -2
end

--- The settings key of the SNI name `name`, or nil.
function M.key_for(name)
  return sni.lookup(names, nil, name)
end

--- ClientHello: apply the name's settings to `ssl` (the connection's SSL*,
-- fetched by the caller when needed). Returns the key (for the session
-- context) or nil; false and an error when they could not be applied.
function M.client_hello(name, ssl)
  refresh()
  if not any then
    return nil
  end
  local key = M.key_for(name)
  if key == nil then
    return nil
  end
  local s = settings[key]
  if s.ciphers ~= "" and not ssl_conn.set_ciphers(ssl, s.ciphers) then
    return false, "SSL_set_cipher_list refused " .. s.ciphers
  end
  if s.prefer ~= "" then
    ssl_conn.prefer_server_ciphers(ssl, s.prefer == "on")
  end
  return key
end

function M.wanted(name)
  refresh()
  return any and M.key_for(name) ~= nil
end

return M
