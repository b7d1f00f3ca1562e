--- Per-route traffic settings (platformd.ingress.traffic) applied per
-- request in the named lanes: X-Forwarded-Prefix, the Connection header,
-- the route's tries, $limit_rate, the rewrite log and the custom error
-- backend (custom_errors.lua).
--
-- The controller sends a policy's `traffic` object only when a setting
-- differs from the default, so routes without one never reach this module.
-- Nothing here decides: the values were validated in Python (and again by
-- `check` when the section is posted). The settings that need a directive
-- (proxy_redirect, proxy_cookie_*, limit_rate_after, access_log off ...)
-- come as generated lanes instead (platformd.ingress.lanes): every variable
-- the configuration names costs every request, so this module uses one,
-- $platform_connection (the lanes set it to $connection_upgrade first).
-- Retries go to the balancer through ngx.ctx.platform_retries (extra
-- attempts after the first; balancer.lua bounds them by the endpoints).
local M = {}

local ngx = ngx

--- The policy's raw `traffic` object (nil or JSON null: none) -> compiled or nil.
function M.compile(t)
  if type(t) ~= "table" then
    return nil
  end
  return {
    forwarded_prefix = type(t.forwarded_prefix) == "string" and t.forwarded_prefix or nil,
    preserve_trailing_slash = t.preserve_trailing_slash == true,
    connection = type(t.connection) == "string" and t.connection or nil,
    retries = type(t.retries) == "number" and t.retries or nil,
    limit_rate = type(t.limit_rate) == "number" and t.limit_rate > 0 and t.limit_rate or nil,
    rewrite_log = t.rewrite_log == true,
    errors = type(t.errors) == "table" and t.errors or nil,
  }
end

-- What a value sent to a variable may hold: printable ASCII without the
-- characters that could end or expand anything (Python refuses them first).
local SAFE = "^[%w%._~:/%?#%[%]@!&%(%)%*%+,=%%%- ]*$"

local function check_text(value, path, fail)
  if value ~= nil and (type(value) ~= "string" or #value > 1024 or not value:match(SAFE)) then
    fail(path, "must be printable text without quotes, ';', '$' or braces")
  end
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
  check_count(t.retries, path .. ".retries", fail)
  check_count(t.limit_rate, path .. ".limit_rate", fail)
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
    -- A request header, passed on with the client's (whose own is replaced).
    ngx.req.set_header("X-Forwarded-Prefix", t.forwarded_prefix)
  end
  if t.connection ~= nil then
    var.platform_connection = t.connection
  end
  if t.limit_rate ~= nil then
    var.limit_rate = t.limit_rate
  end
  if t.retries ~= nil then
    ngx.ctx.platform_retries = t.retries
  end
  if t.errors ~= nil then
    require("custom_errors").remember(t.errors, ngx.ctx.platform_conn)
  end
  if t.rewrite_log and rewritten then
    -- nginx's rewrite_log says what a rewrite did, at notice level.
    local args = var.args
    ngx.log(ngx.NOTICE, "rewritten \"", var.request_uri, "\" to \"", var.uri,
      args ~= nil and args ~= "" and ("?" .. args) or "", "\"")
  end
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile, M.check, check_text, check_count)

return M
