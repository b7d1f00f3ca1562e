-- The pure parts of lua/auth*.lua. The hash verifiers themselves need
-- LuaJIT's FFI, libxcrypt and ngx.md5_bin: they are checked against known
-- vectors through real nginx (tests/ingress/test_auth_nginx.py).
local auth = require("auth")
local basic = require("auth_basic")
local digest = require("auth_digest")
local external = require("auth_external")

local function b64decode(s)
  local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  s = s:gsub("[^%w%+/=]", "")
  return (s:gsub(".", function(x)
    if x == "=" then return "" end
    local r, f = "", (chars:find(x, 1, true) - 1)
    for i = 6, 1, -1 do r = r .. (f % 2 ^ i - f % 2 ^ (i - 1) > 0 and "1" or "0") end
    return r
  end):gsub("%d%d%d?%d?%d?%d?%d?%d?", function(x)
    if #x ~= 8 then return "" end
    local c = 0
    for i = 1, 8 do c = c + (x:sub(i, i) == "1" and 2 ^ (8 - i) or 0) end
    return string.char(c)
  end))
end

describe("auth.decide (satisfy)", function()
  it("without an opinion of the address lists always authenticates", function()
    assert.equal("auth", auth.decide("all", nil))
    assert.equal("auth", auth.decide("any", nil)) -- a deny list alone has no opinion of others
  end)
  it("all: a denied address is refused, an allowed one still authenticates", function()
    assert.equal("deny", auth.decide("all", "denied"))
    assert.equal("auth", auth.decide("all", "allowed"))
  end)
  it("any: an allowed address passes, a denied one may authenticate", function()
    assert.equal("pass", auth.decide("any", "allowed"))
    assert.equal("auth", auth.decide("any", "denied"))
  end)
end)

describe("auth.validate", function()
  local good = { satisfy = "all", type = "basic", realm = "Staff", users = { alice = "{PLAIN}x" } }
  it("accepts what the controller sends", function()
    assert.is_nil(auth.validate(good))
    assert.is_nil(auth.validate({ satisfy = "any", realm = "", external = {
      url = "http://auth.ns.svc:8080/check?x=1", redirect_param = "rd", cache_seconds = 300,
      response_headers = { "X-User" }, cache_key = { "$remote_user" }, proxy_headers = { { "X-T", "blue" } } } }))
  end)
  it("refuses bad entries", function()
    assert.is_not_nil(auth.validate({ satisfy = "some", realm = "" }))
    assert.is_not_nil(auth.validate({ satisfy = "all", realm = 'a"b' }))
    assert.is_not_nil(auth.validate({ satisfy = "all", realm = "", type = "ntlm" }))
    assert.is_not_nil(auth.validate({ satisfy = "all", realm = "", type = "basic", users = { ["a:b"] = "x" } }))
    assert.is_not_nil(auth.validate({ satisfy = "all", realm = "", type = "digest", users = { a = "nothex!" } }))
    for _, url in ipairs({ "ftp://x/", "http://u:p@x/", "http://x/$", 'http://x/"', "http://x/ y" }) do
      assert.is_not_nil(auth.validate({ satisfy = "all", realm = "", external = {
        url = url, redirect_param = "rd", cache_seconds = 0 } }), url)
    end
    assert.is_not_nil(auth.validate({ satisfy = "all", realm = "", external = {
      url = "http://x/", redirect_param = "rd", cache_seconds = 0, proxy_headers = { { "X", "a;b" } } } }))
  end)
end)

describe("auth_basic", function()
  it("parses Basic credentials", function()
    assert.same({ "alice", "pa:ss" }, { basic.parse_authorization("Basic YWxpY2U6cGE6c3M=", b64decode) })
    assert.same({ "alice", "" }, { basic.parse_authorization("basic YWxpY2U6", b64decode) })
    assert.is_nil(basic.parse_authorization("Bearer xyz", b64decode))
    assert.is_nil(basic.parse_authorization("Basic bm9jb2xvbg==", b64decode)) -- "nocolon"
    assert.is_nil(basic.parse_authorization(nil, b64decode))
  end)
  it("picks the verifier by the hash's prefix", function()
    assert.equal("apr1", basic.scheme("$apr1$abcdefgh$wT38ABp1Mi8RiNRvA83Bm."))
    assert.equal("sha", basic.scheme("{SHA}xijDgoRYDk0v1vFBsFGjJUAqaCA="))
    assert.equal("plain", basic.scheme("{PLAIN}x"))
    for _, h in ipairs({ "$2y$05$x", "$2b$05$x", "$6$s$x", "$5$s$x", "$1$s$x" }) do
      assert.equal("crypt", basic.scheme(h))
    end
  end)
  it("encodes an MD5-crypt digest in its byte order", function()
    -- 16 zero bytes -> 22 '.' (the alphabet's first character)
    assert.equal(string.rep(".", 22), basic.md5crypt_encode(string.rep("\0", 16)))
    -- the last byte alone (index 12 of the digest) lands in the last two characters
    local d = string.rep("\0", 11) .. "\1" .. string.rep("\0", 4)
    assert.equal(string.rep(".", 20) .. "/.", basic.md5crypt_encode(d))
  end)
  it("computes apr1 from md5 in the algorithm's order (md5 stubbed: a fixed digest)", function()
    local calls = 0
    local function md5(s)
      calls = calls + 1
      return string.rep("\0", 16)
    end
    assert.equal("$apr1$salt$" .. string.rep(".", 22), basic.apr1("pw", "salt", md5))
    assert.equal(1002, calls) -- the alternate sum, the initial sum, 1000 rounds
  end)
end)

describe("auth_digest", function()
  it("parses a Digest header with quoted commas", function()
    local p = digest.parse_authorization(
      'Digest username="dana", realm="Staff, Inc", nonce="1.ab", uri="/d?x=1", qop=auth, nc=00000001, '
      .. 'cnonce="c1", response="f0"')
    assert.same({ username = "dana", realm = "Staff, Inc", nonce = "1.ab", uri = "/d?x=1", qop = "auth",
                  nc = "00000001", cnonce = "c1", response = "f0" }, p)
    assert.is_nil(digest.parse_authorization("Basic abc"))
    assert.is_nil(digest.parse_authorization('Digest username="unterminated'))
  end)
  it("composes the response as RFC 7616 says", function()
    local function md5(s) return "<" .. s .. ">" end
    local p = { uri = "/u", nonce = "N", nc = "00000001", cnonce = "C", qop = "auth" }
    assert.equal("<HA1:N:00000001:C:auth:<GET:/u>>", digest.expected(p, "HA1", "GET", md5))
  end)
  it("ages nonces", function()
    local function sign(stamp) return "ab" .. stamp end
    assert.equal("valid", digest.nonce_state("1000.ab1000", 1100, sign, 300))
    assert.equal("stale", digest.nonce_state("1000.ab1000", 1301, sign, 300))
    assert.equal("invalid", digest.nonce_state("1000.ab1001", 1100, sign, 300))
    assert.equal("invalid", digest.nonce_state("junk", 1100, sign, 300))
    assert.equal("invalid", digest.nonce_state("2000.ab2000", 1100, sign, 300)) -- from the future
  end)
end)

describe("auth_external", function()
  local function escape(s) return (s:gsub("[^%w]", function(c) return string.format("%%%02X", c:byte()) end)) end
  it("adds the original URL to the sign-in URL once", function()
    assert.equal("https://sso/start?rd=http%3A%2F%2Fa%2Fp",
                 external.signin_location("https://sso/start", "rd", "http://a/p", escape))
    assert.equal("https://sso/start?x=1&rd=http%3A%2F%2Fa%2Fp",
                 external.signin_location("https://sso/start?x=1", "rd", "http://a/p", escape))
    assert.equal("https://sso/start?rd=/home", external.signin_location("https://sso/start?rd=/home", "rd", "x", escape))
  end)
  it("caches only the listed statuses (0: any)", function()
    assert.is_true(external.cacheable({ 200, 401 }, 401))
    assert.is_false(external.cacheable({ 200 }, 500))
    assert.is_true(external.cacheable({ 0 }, 503))
  end)
  it("expands the cache key", function()
    local vars = { remote_user = "alice" }
    assert.equal("alice|", external.expand({ "$remote_user", "|", "$http_authorization" },
                                          function(name) return vars[name] end))
  end)
  it("finds the Host of the auth URL", function()
    assert.equal("auth.ns.svc:8080", external.host_of("http://auth.ns.svc:8080/check?x"))
    assert.equal("[fd00::1]", external.host_of("https://[fd00::1]/x"))
  end)
end)

describe("auth_external.template", function()
  it("splits a URL into literal parts and variables", function()
    assert.is_nil(external.template("https://auth/x"))
    assert.same({ "https://", "$host", "/x?rd=", "$escaped_request_uri" },
                external.template("https://$host/x?rd=${escaped_request_uri}"))
    local vars = { host = "app.example", escaped_request_uri = "%2Fp" }
    assert.equal("https://app.example/x?rd=%2Fp",
                 external.expand(external.template("https://$host/x?rd=$escaped_request_uri"),
                                 function(n) return vars[n] end))
  end)
  it("validates URLs with variables", function()
    local function check(url)
      return auth.validate({ satisfy = "all", realm = "", external = { url = url, redirect_param = "rd",
                                                                        cache_seconds = 0 } })
    end
    assert.is_nil(check("https://$host/oauth2/auth"))
    assert.is_nil(check("$scheme://${host}/oauth2/auth?rd=$escaped_request_uri"))
    assert.is_not_nil(check("https://$host/x;y"))
    assert.is_not_nil(check("https://${host/x"))
  end)
end)
