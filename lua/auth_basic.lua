--- HTTP Basic authentication against htpasswd entries (auth-type: basic).
--
-- The formats nginx's auth_basic reads and users have in their files:
--   $2y$ / $2b$ / $2a$  bcrypt        crypt_r (libxcrypt)
--   $5$ / $6$           SHA-crypt     crypt_r
--   $1$                 MD5-crypt     crypt_r
--   $apr1$              Apache MD5    here (libxcrypt does not know it)
--   {SHA}               base64 SHA-1  here
--   {PLAIN}             clear text    here
-- The controller refuses any other format (platformd.ingress.auth), so an
-- entry here is always one of these.
--
-- crypt_r comes from libcrypt.so.1 through the LuaJIT FFI: Debian 12's
-- libcrypt1 is libxcrypt 4.4, which implements bcrypt, SHA-crypt and
-- MD5-crypt. It runs on the worker's thread and blocks it: with the same
-- library (python3 crypt, this machine) bcrypt cost 10 takes 44 ms, cost 5
-- 1.5 ms, $6$ 0.9 ms, $5$ 0.8 ms, $1$ 0.09 ms per verification. So
-- successful verifications are remembered in a per-worker LRU
-- (VERIFIED_SIZE entries) keyed by md5(hash, user, password): a busy route
-- pays bcrypt once per worker and user. Measured through nginx
-- (bench/bench_auth.py): a bcrypt cost-10 request 45 ms on a miss, 0.36 ms
-- on a hit, the same route without auth 0.40 ms.
-- The key holds the stored hash, so a changed password (a new hash) is a
-- miss; a removed user fails before the cache is asked. Failures are never
-- cached: a wrong password costs a verification each time, as in nginx.
local M = {}

local ngx = ngx
local sub = string.sub
local byte = string.byte

M.VERIFIED_SIZE = 4096
M.VERIFIED_TTL = 600 -- seconds; bounds how long a removed cache entry may linger

---------------------------------------------------------------------------
-- Pure parts (tests/lua/auth_basic_spec.lua)
---------------------------------------------------------------------------

--- "Basic dXNlcjpwYXNz" -> "user", "pass" (nil when not Basic or malformed).
-- `decode` is base64 decoding (ngx.decode_base64 in nginx).
function M.parse_authorization(header, decode)
  if type(header) ~= "string" then
    return nil
  end
  local encoded = header:match("^[Bb][Aa][Ss][Ii][Cc] +([A-Za-z0-9+/=]+) *$")
  if encoded == nil then
    return nil
  end
  local decoded = decode(encoded)
  if decoded == nil then
    return nil
  end
  local colon = decoded:find(":", 1, true)
  if colon == nil then
    return nil
  end
  return sub(decoded, 1, colon - 1), sub(decoded, colon + 1)
end

--- Which verifier a stored hash needs: "crypt", "apr1", "sha", "plain".
function M.scheme(hash)
  if sub(hash, 1, 6) == "$apr1$" then
    return "apr1"
  end
  if sub(hash, 1, 5) == "{SHA}" then
    return "sha"
  end
  if sub(hash, 1, 7) == "{PLAIN}" then
    return "plain"
  end
  return "crypt"
end

local ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

--- The 22-character MD5-crypt encoding of a 16-byte digest (its byte
-- order is the algorithm's own).
function M.md5crypt_encode(final)
  local out = {}
  local function to64(v, n)
    for _ = 1, n do
      local i = v % 64
      out[#out + 1] = sub(ITOA64, i + 1, i + 1)
      v = (v - i) / 64
    end
  end
  local b = { byte(final, 1, 16) }
  local groups = { { 1, 7, 13 }, { 2, 8, 14 }, { 3, 9, 15 }, { 4, 10, 16 }, { 5, 11, 6 } }
  for _, g in ipairs(groups) do
    to64(b[g[1]] * 65536 + b[g[2]] * 256 + b[g[3]], 4)
  end
  to64(b[12], 2)
  return table.concat(out)
end

--- Apache's MD5 ($apr1$, the MD5-crypt algorithm with another magic).
-- `md5` returns the 16-byte digest of a string (ngx.md5_bin).
function M.apr1(password, salt, md5)
  local magic = "$apr1$"
  local alternate = md5(password .. salt .. password)
  local parts = { password, magic, salt }
  local n = #password
  while n > 0 do
    parts[#parts + 1] = sub(alternate, 1, n > 16 and 16 or n)
    n = n - 16
  end
  n = #password
  while n > 0 do
    parts[#parts + 1] = (n % 2 == 1) and "\0" or sub(password, 1, 1)
    n = math.floor(n / 2)
  end
  local final = md5(table.concat(parts))
  for i = 0, 999 do
    local c = {}
    c[1] = (i % 2 == 1) and password or final
    if i % 3 ~= 0 then
      c[#c + 1] = salt
    end
    if i % 7 ~= 0 then
      c[#c + 1] = password
    end
    c[#c + 1] = (i % 2 == 1) and final or password
    final = md5(table.concat(c))
  end
  return magic .. salt .. "$" .. M.md5crypt_encode(final)
end

---------------------------------------------------------------------------
-- nginx glue
---------------------------------------------------------------------------

local crypt_r -- function(password, setting) -> string | nil, loaded on first use
local verified -- resty.lrucache, per worker

local function load_crypt()
  local ffi = require("ffi")
  ffi.cdef([[char *crypt_r(const char *phrase, const char *setting, void *data);]])
  local lib = ffi.load("libcrypt.so.1")
  -- struct crypt_data is 32,768 bytes in libxcrypt; zeroed by ffi.new, as
  -- crypt_r wants on first use. One per worker (a worker runs one at a time).
  local data = ffi.new("char[?]", 32768)
  return function(password, setting)
    local out = lib.crypt_r(password, setting, data)
    if out == nil then
      return nil
    end
    local text = ffi.string(out)
    if byte(text, 1) == 42 then -- "*0" / "*1": libxcrypt's failure tokens
      return nil
    end
    return text
  end
end

--- Whether `password` matches the stored `hash` (any supported format).
function M.verify(password, hash)
  local scheme = M.scheme(hash)
  if scheme == "plain" then
    return password == sub(hash, 8)
  end
  if scheme == "sha" then
    return "{SHA}" .. ngx.encode_base64(ngx.sha1_bin(password)) == hash
  end
  if scheme == "apr1" then
    local salt = hash:match("^%$apr1%$([^$]*)%$")
    return salt ~= nil and M.apr1(password, salt, ngx.md5_bin) == hash
  end
  if crypt_r == nil then
    crypt_r = load_crypt()
  end
  return crypt_r(password, hash) == hash
end

--- users ({name = hash}) -> the route's compiled basic auth.
function M.compile(users, realm)
  return { users = users, challenge = 'Basic realm="' .. realm .. '"' }
end

local function challenge(basic)
  return function()
    ngx.header["WWW-Authenticate"] = basic.challenge
    return ngx.exit(ngx.HTTP_UNAUTHORIZED)
  end
end

--- true when the request's credentials match, else the function sending 401.
function M.check(basic)
  local user, password = M.parse_authorization(ngx.var.http_authorization, ngx.decode_base64)
  local hash = user and basic.users[user]
  if hash == nil then
    return challenge(basic)
  end
  if verified == nil then
    verified = require("resty.lrucache").new(M.VERIFIED_SIZE)
  end
  local key = ngx.md5_bin(hash .. "\0" .. user .. "\0" .. password)
  if verified:get(key) then
    return true
  end
  if not M.verify(password, hash) then
    return challenge(basic)
  end
  verified:set(key, true, M.VERIFIED_TTL)
  return true
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
