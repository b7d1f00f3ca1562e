--- Request mirroring (platformd.ingress.mirror): where the copy of a request
-- goes, decided per request from the route's policy ("mirror").
--
-- A mirrored route is proxied by a directive lane holding `mirror
-- /_platform_mirror` (and `mirror_request_body`); nginx then makes a
-- subrequest to the one fixed internal location /_platform_mirror, whose
-- proxy_pass reads the variables `prepare` set in the lane's rewrite phase
-- (a subrequest shares the variables of its parent request):
--   $platform_mirror           "1" when this request is copied (its share won)
--   $platform_mirror_scheme    http | https
--   $platform_mirror_upstream  "ip:port", or chosen by `subrequest()` from a
--                              Backend's endpoints (Gateway RequestMirror)
--   $platform_mirror_uri       the URI of the copy
--   $platform_mirror_host      its Host header
-- A request not chosen makes the subrequest answer 204 at once (no
-- connection is opened).
local ngx = ngx
local null = ngx and require("cjson.safe").null
local eval = require("headers").eval

local M = {}

local SCHEMES = { http = true, https = true }

local function opt(x)
  if x == null then
    return nil
  end
  return x
end

--- Whether `value` is a policy's "mirror": true, or nil and a reason.
function M.check(value, path)
  if value == nil or value == null then
    return true
  end
  if type(value) ~= "table" or not SCHEMES[value.scheme] then
    return nil, path .. ".scheme: must be http or https"
  end
  local address, backend = opt(value.address), opt(value.backend)
  if (address == nil) == (backend == nil) then
    return nil, path .. ": needs exactly one of address and backend"
  end
  if address ~= nil and (type(address) ~= "string" or not address:match("^%[?[%x%.:]+%]?:%d+$")) then
    return nil, path .. ".address: must be ip:port"
  end
  if backend ~= nil and (type(backend) ~= "string" or not backend:match("^[%w][%w%._%-]*$")) then
    return nil, path .. ".backend: must be a backend name"
  end
  if type(value.host) ~= "string" or not value.host:match("^[%w%.%-%[%]:]*$") then
    return nil, path .. ".host: must be a host name"
  end
  if type(value.uri) ~= "table" then
    return nil, path .. ".uri: must be an array"
  end
  for _, part in ipairs(value.uri) do
    if type(part) == "string" then
      if not part:match("^[%w%._~!&()*+,=:@%%/?%-]*$") then
        return nil, path .. ".uri: must be URL characters"
      end
    elseif type(part) ~= "table" or part.v ~= "request_uri" then
      return nil, path .. ".uri: only $request_uri may be used"
    end
  end
  local n, d = value.numerator, value.denominator
  if type(n) ~= "number" or type(d) ~= "number" or n < 0 or d < 1 or n > d then
    return nil, path .. ": numerator/denominator must be 0 <= n <= d, d >= 1"
  end
  return true
end

--- A policy's "mirror" -> what `prepare` takes (nil for none).
function M.compile(value)
  if value == nil or value == null then
    return nil
  end
  local uri = {}
  for i, part in ipairs(value.uri) do
    uri[i] = type(part) == "string" and part or { part.v }
  end
  return {
    scheme = value.scheme,
    address = opt(value.address),
    backend = opt(value.backend),
    uri = uri[1] ~= nil and uri or nil,
    host = value.host ~= "" and value.host or nil,
    numerator = value.numerator,
    denominator = value.denominator,
  }
end

--- Whether this request's copy goes out (the share, per request).
function M.chosen(m)
  if m.numerator >= m.denominator then
    return true
  end
  return m.numerator > 0 and math.random(m.denominator) <= m.numerator
end

--- Rewrite phase of the lane proxying a mirrored route.
function M.prepare(m)
  local var = ngx.var
  if not M.chosen(m) then
    var.platform_mirror = ""
    return
  end
  var.platform_mirror = "1"
  var.platform_mirror_scheme = m.scheme
  var.platform_mirror_upstream = m.address or ""
  var.platform_mirror_backend = m.backend or ""
  var.platform_mirror_uri = m.uri and eval(m.uri) or var.request_uri
  var.platform_mirror_host = m.host or var.host
end

-- Set by platform.init once every module is loaded.
local balancer

--- Rewrite phase of /_platform_mirror* (the subrequest). `grpc`: the copy
-- is a gRPC call, whose :path is the subrequest's own URI: set it back to
-- the call's (no query in gRPC).
function M.subrequest(grpc)
  local var = ngx.var
  if var.platform_mirror ~= "1" then
    return ngx.exit(204)
  end
  if grpc then
    ngx.req.set_uri(var.platform_mirror_uri:match("^[^?]*"))
  end
  local backend = var.platform_mirror_backend
  if backend ~= "" then
    local address = balancer.endpoint_of(backend)
    if address == nil then
      return ngx.exit(503)
    end
    var.platform_mirror_upstream = address
  end
end

function M.init()
  balancer = require("balancer")
end

return M
