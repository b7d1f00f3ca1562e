--- Per-host TLS settings (ssl-ciphers, ssl-prefer-server-ciphers), as data
-- from platformd.ingress.host_tls: applied at ClientHello on the
-- connection's SSL* for the SNI name (lua/certificate.lua calls us), before
-- OpenSSL chooses a cipher. The data is the "routes" section's host_tls
-- ({names = {name = key}, settings = {key = {ciphers, prefer}}}).
local ssl_conn = require("util.ssl_conn")

local M = {}

local tls = require("util.sni_table").new("host_tls", "settings")

--- For specs: load `data` as if it came from the "routes" section.
function M.load(data)
  tls:load(data, -2)
end

--- The settings key of the SNI name `name`, or nil.
function M.key_for(name)
  return tls:key_for(name)
end

--- ClientHello: apply the name's settings to `ssl` (the connection's SSL*,
-- fetched by the caller when needed). Returns the key (for the session
-- context) or nil; false and an error when they could not be applied.
function M.client_hello(name, ssl)
  tls:refresh()
  if not tls.any then
    return nil
  end
  local key = tls:key_for(name)
  if key == nil then
    return nil
  end
  local s = tls.entries[key]
  if s.ciphers ~= "" and not ssl_conn.set_ciphers(ssl, s.ciphers) then
    return false, "SSL_set_cipher_list refused " .. s.ciphers
  end
  if s.prefer ~= "" then
    ssl_conn.prefer_server_ciphers(ssl, s.prefer == "on")
  end
  return key
end

function M.wanted(name)
  tls:refresh()
  return tls.any and tls:key_for(name) ~= nil
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.load)

return M
