--- Per-route traffic settings (platformd.ingress.traffic): response
-- rewriting, retries, bandwidth, logs and two request headers, applied per
-- request in the named lanes.
--
-- The controller sends a policy's `traffic` object only when a setting
-- differs from the default, so routes without one never reach this module.
-- Nothing here decides: the values were validated in Python (and again by
-- `check` when the section is posted) and are written into the variables
-- the lanes of templates/nginx.conf.j2 read:
--   proxy_redirect      $platform_redirect_from $platform_redirect_to
--   proxy_cookie_domain $platform_cookie_domain_from $platform_cookie_domain_to
--   proxy_cookie_path   $platform_cookie_path_from $platform_cookie_path_to
--   X-Forwarded-Prefix  $platform_forwarded_prefix (empty: no header)
--   Connection          $platform_connection_header (empty: the websocket default)
--   limit_rate_after    $platform_limit_rate_after, and nginx's own $limit_rate
--   access_log ... if=$platform_access_log ($platform_no_access_log set: off)
-- Empty variables rewrite nothing: an empty proxy_redirect prefix replaced by
-- an empty one leaves the header as it is; an empty cookie domain matches no
-- cookie that has a domain.
-- Retries go to the balancer through ngx.ctx.platform_retries (extra
-- attempts after the first; balancer.lua bounds them by the endpoints).
local M = {}

local ngx = ngx

local function pair(value)
  if type(value) == "table" and type(value[1]) == "string" and type(value[2]) == "string" then
    return value[1], value[2]
  end
  return nil, nil
end

--- The policy's raw `traffic` object (nil or JSON null: none) -> compiled or nil.
function M.compile(t)
  if type(t) ~= "table" then
    return nil
  end
  local c = {
    forwarded_prefix = type(t.forwarded_prefix) == "string" and t.forwarded_prefix or nil,
    preserve_trailing_slash = t.preserve_trailing_slash == true,
    connection = type(t.connection) == "string" and t.connection or nil,
    retries = type(t.retries) == "number" and t.retries or nil,
    limit_rate = type(t.limit_rate) == "number" and t.limit_rate > 0 and t.limit_rate or nil,
    limit_rate_after = type(t.limit_rate_after) == "number" and t.limit_rate_after or 0,
    no_access_log = t.access_log == false,
    rewrite_log = t.rewrite_log == true,
    errors = type(t.errors) == "table" and t.errors or nil,
  }
  c.redirect_from, c.redirect_to = pair(t.proxy_redirect)
  c.cookie_domain_from, c.cookie_domain_to = pair(t.cookie_domain)
  c.cookie_path_from, c.cookie_path_to = pair(t.cookie_path)
  return c
end

-- What a value sent to a variable may hold: printable ASCII without the
-- characters that could end or expand anything (Python refuses them first).
local SAFE = "^[%w%._~:/%?#%[%]@!&%(%)%*%+,=%%%- ]*$"

local function check_text(value, path, fail)
  if value ~= nil and (type(value) ~= "string" or #value > 1024 or not value:match(SAFE)) then
    fail(path, "must be printable text without quotes, ';', '$' or braces")
  end
end

local function check_pair(value, path, fail)
  if value == nil then
    return
  end
  if type(value) ~= "table" or #value ~= 2 then
    fail(path, "must be [from, to]")
  end
  check_text(value[1], path .. "[1]", fail)
  check_text(value[2], path .. "[2]", fail)
end

local function check_count(value, path, fail)
  if value ~= nil and (type(value) ~= "number" or value < 0 or value > 2^40 or value ~= math.floor(value)) then
    fail(path, "must be a non-negative integer")
  end
end

--- Validates a policy's `traffic` (for util/schema.lua; `null` is the JSON
-- null sentinel). Calls `fail(path, problem)`, which raises.
function M.check(t, path, fail, null)
  if t == nil or t == null then
    return
  end
  if type(t) ~= "table" then
    fail(path, "must be an object")
  end
  check_text(t.forwarded_prefix, path .. ".forwarded_prefix", fail)
  check_text(t.connection, path .. ".connection", fail)
  check_pair(t.proxy_redirect, path .. ".proxy_redirect", fail)
  check_pair(t.cookie_domain, path .. ".cookie_domain", fail)
  check_pair(t.cookie_path, path .. ".cookie_path", fail)
  check_count(t.retries, path .. ".retries", fail)
  check_count(t.limit_rate, path .. ".limit_rate", fail)
  check_count(t.limit_rate_after, path .. ".limit_rate_after", fail)
  local errors = t.errors
  if errors ~= nil and errors ~= null then
    if type(errors) ~= "table" then
      fail(path .. ".errors", "must be an object")
    end
    for _, field in ipairs({ "backend", "namespace", "ingress", "service", "port" }) do
      local value = errors[field]
      if type(value) ~= "string" or value == "" or #value > 253 or not value:match("^[%w%.%-_]+$") then
        fail(path .. ".errors." .. field, "must be a name")
      end
    end
  end
end

--- The URI an HTTPS redirect sends to: ingress-nginx drops one trailing "/"
-- unless preserve-trailing-slash is set (`t` may be nil).
function M.redirect_uri(t, request_uri)
  if (t == nil or not t.preserve_trailing_slash) and request_uri:byte(-1) == 47 then
    return request_uri:sub(1, -2)
  end
  return request_uri
end

--- Rewrite phase of a named lane, after the router's own rewrite.
function M.apply(t, rewritten)
  local var = ngx.var
  if t.forwarded_prefix ~= nil then
    var.platform_forwarded_prefix = t.forwarded_prefix
  end
  if t.redirect_from ~= nil then
    var.platform_redirect_from = t.redirect_from
    var.platform_redirect_to = t.redirect_to
  end
  if t.cookie_domain_from ~= nil then
    var.platform_cookie_domain_from = t.cookie_domain_from
    var.platform_cookie_domain_to = t.cookie_domain_to
  end
  if t.cookie_path_from ~= nil then
    var.platform_cookie_path_from = t.cookie_path_from
    var.platform_cookie_path_to = t.cookie_path_to
  end
  if t.connection ~= nil then
    var.platform_connection_header = t.connection
  end
  if t.limit_rate ~= nil then
    var.platform_limit_rate_after = t.limit_rate_after
    var.limit_rate = t.limit_rate
  end
  if t.no_access_log then
    var.platform_no_access_log = "1"
  end
  if t.retries ~= nil then
    ngx.ctx.platform_retries = t.retries
  end
  if t.errors ~= nil then
    require("custom_errors").remember(t.errors)
  end
  if t.rewrite_log and rewritten then
    -- nginx's rewrite_log says what a rewrite did, at notice level.
    local args = var.args
    ngx.log(ngx.NOTICE, "rewritten \"", var.request_uri, "\" to \"", var.uri,
      args ~= nil and args ~= "" and ("?" .. args) or "", "\"")
  end
end

return M
