--- The connection's OpenSSL `SSL*` in the TLS phases, and the few calls we
-- make on it (per-host settings of the one TLS context, see
-- lua/certificate.lua). lua-resty-core 0.1.25 has no Lua API for these; the
-- pointer comes from lua-nginx-module's own FFI export and the calls are
-- OpenSSL's public API (nginx links libssl, so ffi.C finds them).
local M = {}

local ffi, C, get_request
local available = nil -- nil: not probed yet; then true/false

-- OpenSSL's SSL_OP_CIPHER_SERVER_PREFERENCE (ssl.h, 1.1.1 and 3.x).
local CIPHER_SERVER_PREFERENCE = 0x00400000 -- a number converts to the uint64_t argument

local function probe()
  if available ~= nil then
    return available
  end
  ffi = require("ffi")
  -- pcall: another module may have declared them already.
  pcall(ffi.cdef, "void *ngx_http_lua_ffi_get_req_ssl_pointer(void *r);")
  pcall(ffi.cdef, "int SSL_set_session_id_context(void *ssl, const unsigned char *ctx, unsigned int len);")
  pcall(ffi.cdef, "int SSL_set_cipher_list(void *ssl, const char *str);")
  pcall(ffi.cdef, "uint64_t SSL_set_options(void *ssl, uint64_t op);")
  pcall(ffi.cdef, "uint64_t SSL_clear_options(void *ssl, uint64_t op);")
  C = ffi.C
  get_request = require("resty.core.base").get_request
  available = pcall(function()
    return C.ngx_http_lua_ffi_get_req_ssl_pointer and C.SSL_set_session_id_context and C.SSL_set_cipher_list
      and C.SSL_set_options and C.SSL_clear_options
  end)
  if not available then
    ngx.log(ngx.ERR, "util.ssl_conn: the SSL functions are not reachable through the FFI")
  end
  return available
end

--- The current connection's SSL*, or nil (and an error).
function M.pointer()
  if not probe() then
    return nil, "FFI calls unavailable"
  end
  local r = get_request()
  if r == nil then
    return nil, "no request"
  end
  local ssl = C.ngx_http_lua_ffi_get_req_ssl_pointer(r)
  if ssl == nil then
    return nil, "no SSL connection"
  end
  return ssl
end

--- Session id context (at most 32 bytes): OpenSSL resumes a session only
-- under the context it was made in.
function M.set_session_context(ssl, context)
  return C.SSL_set_session_id_context(ssl, context, #context) == 1
end

function M.set_ciphers(ssl, list)
  return C.SSL_set_cipher_list(ssl, list) == 1
end

function M.prefer_server_ciphers(ssl, on)
  if on then
    C.SSL_set_options(ssl, CIPHER_SERVER_PREFERENCE)
  else
    C.SSL_clear_options(ssl, CIPHER_SERVER_PREFERENCE)
  end
end

return M
