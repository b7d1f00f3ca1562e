--- Request mirroring (platformd.ingress.mirror): where the copies of a
-- request go, decided per request from the route's policy ("mirror", with
-- further copies under "also").
--
-- A mirrored route is proxied by a directive lane holding one `mirror` per
-- copy: /_platform_mirror for the first, /_platform_mirror/<i> for copy i
-- (and `mirror_request_body`); nginx then makes one subrequest per copy,
-- whose proxy_pass reads the variables `prepare` set in the lane's rewrite
-- phase (a subrequest shares the variables of its parent request):
--   $platform_mirror           one character per copy, "1" when this request
--                              is copied there (its share won), else "0"
--   $platform_mirror_scheme    http | https
--   $platform_mirror_backend   the copies' targets, space-separated: an
--                              "ip:port" or a Backend's name (Gateway RequestMirror)
--   $platform_mirror_uri       the URI of the copies
--   $platform_mirror_host      their Host header
-- Each subrequest, in its own rewrite phase, takes its target by its index
-- and writes it to $platform_mirror_upstream (an endpoint picked for a
-- Backend), which its proxy_pass reads before the next subrequest runs
-- (nginx runs posted subrequests one after another, and nothing here
-- yields). A copy not chosen answers 204 at once (no connection is opened).
local ngx = ngx
local opt = require("util.nullable").value -- JSON null: nil
local eval = require("headers").eval

local M = {}

local SCHEMES = { http = true, https = true }

-- The lane's `mirror` directives (platformd.ingress.mirror.MAX_COPIES).
local MAX_COPIES = 16

-- An address "ip:port" never looks like a Backend name (no ':' in those).
local ADDRESS = "^%[?[%x%.:]+%]?:%d+$"

local function target(value, path)
  if type(value) ~= "table" then
    return nil, path .. ": must be an object"
  end
  local address, backend = opt(value.address), opt(value.backend)
  if (address == nil) == (backend == nil) then
    return nil, path .. ": needs exactly one of address and backend"
  end
  if address ~= nil and (type(address) ~= "string" or not address:match(ADDRESS)) then
    return nil, path .. ".address: must be ip:port"
  end
  if backend ~= nil and (type(backend) ~= "string" or not backend:match("^[%w][%w%._%-]*$")) then
    return nil, path .. ".backend: must be a backend name"
  end
  return true
end

local function share(value, path)
  local n, d = value.numerator, value.denominator
  if type(n) ~= "number" or type(d) ~= "number" or n < 0 or d < 1 or n > d then
    return nil, path .. ": numerator/denominator must be 0 <= n <= d, d >= 1"
  end
  return true
end

--- Whether `value` is a policy's "mirror": true, or nil and a reason.
function M.check(value, path)
  if opt(value) == nil then
    return true
  end
  if type(value) ~= "table" or not SCHEMES[value.scheme] then
    return nil, path .. ".scheme: must be http or https"
  end
  local ok, err = target(value, path)
  if not ok then
    return nil, err
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
  local ok, err = share(value, path)
  if not ok then
    return nil, err
  end
  local also = opt(value.also)
  if also == nil then
    return true
  end
  if type(also) ~= "table" or #also + 1 > MAX_COPIES then
    return nil, path .. ".also: must be an array of at most " .. (MAX_COPIES - 1) .. " copies"
  end
  for i, other in ipairs(also) do
    ok, err = target(other, path .. ".also[" .. i .. "]")
    if ok then
      ok, err = share(other, path .. ".also[" .. i .. "]")
    end
    if not ok then
      return nil, err
    end
  end
  return true
end

--- A policy's "mirror" -> what `prepare` takes (nil for none): the shared
-- scheme, uri and host, `copies` = the shares in the lane's order, and
-- `targets` = their addresses / Backend names as $platform_mirror_backend.
function M.compile(value)
  if opt(value) == nil then
    return nil
  end
  local uri = {}
  for i, part in ipairs(value.uri) do
    uri[i] = type(part) == "string" and part or { part.v }
  end
  local copies, targets = {}, {}
  for i, one in ipairs({ value, unpack(opt(value.also) or {}) }) do
    copies[i] = { numerator = one.numerator, denominator = one.denominator }
    targets[i] = opt(one.address) or opt(one.backend)
  end
  return {
    scheme = value.scheme,
    uri = uri[1] ~= nil and uri or nil,
    host = value.host ~= "" and value.host or nil,
    copies = copies,
    targets = table.concat(targets, " "),
  }
end

--- Whether this request's copy goes out (one copy's share, per request).
function M.chosen(copy)
  if copy.numerator >= copy.denominator then
    return true
  end
  return copy.numerator > 0 and math.random(copy.denominator) <= copy.numerator
end

--- Rewrite phase of the lane proxying a mirrored route.
function M.prepare(m)
  local var = ngx.var
  local copies, mask, any = m.copies, {}, false
  for i = 1, #copies do
    local chosen = M.chosen(copies[i])
    mask[i] = chosen and "1" or "0"
    any = any or chosen
  end
  if not any then
    var.platform_mirror = ""
    return
  end
  var.platform_mirror = table.concat(mask)
  var.platform_mirror_scheme = m.scheme
  var.platform_mirror_backend = m.targets
  var.platform_mirror_uri = m.uri and eval(m.uri) or var.request_uri
  var.platform_mirror_host = m.host or var.host
end

-- The index'th space-separated word of `s`.
local function word(s, index)
  local i = 0
  for w in s:gmatch("%S+") do
    i = i + 1
    if i == index then
      return w
    end
  end
  return nil
end

-- Set by platform.init once every module is loaded.
local balancer

--- Rewrite phase of /_platform_mirror* (the subrequest). `grpc`: the copy
-- is a gRPC call, whose :path is the subrequest's own URI: set it back to
-- the call's (no query in gRPC).
function M.subrequest(grpc)
  local var = ngx.var
  -- Copy i's location is the first one's + "/<i>" (none for the first).
  local index = tonumber(var.uri:match("/(%d+)$")) or 1
  local mask = var.platform_mirror
  if mask:sub(index, index) ~= "1" then
    return ngx.exit(204)
  end
  local address = word(var.platform_mirror_backend, index)
  if address == nil then
    return ngx.exit(204)
  end
  if grpc then
    ngx.req.set_uri(var.platform_mirror_uri:match("^[^?]*"))
  end
  if not address:match(ADDRESS) then -- a Backend: one of its endpoints, per copy
    address = balancer.endpoint_of(address)
    if address == nil then
      return ngx.exit(503)
    end
  end
  var.platform_mirror_upstream = address
end

function M.init()
  balancer = require("balancer")
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.check, M.compile, target, share)

return M
