--- HTTP Digest authentication (auth-type: digest), RFC 7616 / 2617 with
-- MD5 and qop=auth, against htdigest entries (user:realm:HA1, HA1 =
-- MD5(user:realm:password)), as ingress-nginx's digest module reads them.
--
-- Nonces are stateless and shared by every worker: "<time>.<hmac>" where
-- hmac = HMAC-SHA1(key, time:realm) and the key is 32 random bytes kept in
-- the platform_auth shared dict (made by the first worker that needs it).
-- A nonce is accepted for NONCE_TTL seconds (older: 401 with stale=true, the
-- browser retries without asking the user). Replay: each (nonce, nc) pair is
-- accepted once (an atomic add in the shared dict, kept for the nonce's
-- lifetime), so a captured request cannot be sent again; the uri parameter
-- must be the request's own target, so a response cannot be reused for
-- another path.
local M = {}

local ngx = ngx

M.NONCE_TTL = 300

---------------------------------------------------------------------------
-- Pure parts (tests/lua/auth_digest_spec.lua)
---------------------------------------------------------------------------

--- 'Digest username="a", nc=00000001, ...' -> {username = "a", nc = ...}
-- (nil when it is not a Digest header). Quoted values may hold commas;
-- backslash escapes are taken literally off (RFC 7616 3.4: quoted-string).
function M.parse_authorization(header)
  if type(header) ~= "string" then
    return nil
  end
  local rest = header:match("^[Dd][Ii][Gg][Ee][Ss][Tt] +(.*)$")
  if rest == nil or #rest > 4096 then
    return nil
  end
  local params = {}
  local pos = 1
  while pos <= #rest do
    local key, after = rest:match("^[ ,]*([%w_%-]+)=()", pos)
    if key == nil then
      break
    end
    local value
    if rest:sub(after, after) == '"' then
      local close = rest:find('"', after + 1, true)
      if close == nil then
        return nil
      end
      value = rest:sub(after + 1, close - 1):gsub("\\(.)", "%1")
      pos = close + 1
    else
      value, pos = rest:match("^([^ ,]*)()", after)
    end
    params[key:lower()] = value
  end
  return params
end

--- The expected `response` of `p` (parsed header) for `ha1` and `method`;
-- `md5` returns a lower-case hex digest (ngx.md5).
function M.expected(p, ha1, method, md5)
  local ha2 = md5(method .. ":" .. p.uri)
  return md5(ha1 .. ":" .. p.nonce .. ":" .. p.nc .. ":" .. p.cnonce .. ":" .. p.qop .. ":" .. ha2)
end

--- "valid", "stale" or "invalid" for a nonce at time `now`.
-- `sign(time_text)` is the nonce's hmac (hex).
function M.nonce_state(nonce, now, sign, ttl)
  local stamp, mac = (nonce or ""):match("^(%d+)%.(%x+)$")
  if stamp == nil or mac ~= sign(stamp) then
    return "invalid"
  end
  local age = now - tonumber(stamp)
  if age < -5 then
    return "invalid"
  end
  return age > ttl and "stale" or "valid"
end

---------------------------------------------------------------------------
-- nginx glue
---------------------------------------------------------------------------

local function dict()
  return ngx.shared.platform_auth
end

local key_cache -- the shared key, once read

local function key()
  if key_cache ~= nil then
    return key_cache
  end
  local d = dict()
  local k = d:get("digest_key")
  if k == nil then
    local f = assert(io.open("/dev/urandom", "rb"))
    local random = f:read(32)
    f:close()
    d:add("digest_key", random) -- the first worker's wins
    k = d:get("digest_key")
  end
  key_cache = k
  return k
end

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function signer(realm)
  return function(stamp)
    return hex(ngx.hmac_sha1(key(), stamp .. ":" .. realm))
  end
end

function M.compile(users, realm)
  return { users = users, realm = realm, sign = signer(realm) }
end

local function challenge(digest, stale)
  return function()
    local stamp = tostring(ngx.time())
    ngx.header["WWW-Authenticate"] = 'Digest realm="' .. digest.realm .. '", qop="auth", algorithm=MD5, nonce="'
      .. stamp .. "." .. digest.sign(stamp) .. '"' .. (stale and ", stale=true" or "")
    return ngx.exit(ngx.HTTP_UNAUTHORIZED)
  end
end

function M.check(digest)
  local p = M.parse_authorization(ngx.var.http_authorization)
  if p == nil or p.username == nil or p.response == nil or p.uri == nil or p.nonce == nil then
    return challenge(digest, false)
  end
  local ha1 = digest.users[p.username]
  if ha1 == nil or p.realm ~= digest.realm or p.qop ~= "auth" or not (p.nc or ""):match("^%x%x%x%x%x%x%x%x$")
      or p.cnonce == nil or (p.algorithm ~= nil and p.algorithm:upper() ~= "MD5")
      or p.uri ~= ngx.var.request_uri then
    return challenge(digest, false)
  end
  local state = M.nonce_state(p.nonce, ngx.time(), digest.sign, M.NONCE_TTL)
  if state ~= "valid" then
    return challenge(digest, state == "stale")
  end
  if M.expected(p, ha1, ngx.req.get_method(), ngx.md5) ~= p.response:lower() then
    return challenge(digest, false)
  end
  -- Each (nonce, nc) once: a replayed request finds its pair taken.
  local fresh = dict():add("dn:" .. p.nonce .. ":" .. p.nc, true, M.NONCE_TTL + 5)
  if not fresh then
    return challenge(digest, false)
  end
  return true
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
