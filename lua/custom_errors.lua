--- custom-http-errors (platformd.ingress.custom_errors): the rewrite phase
-- of `@platform_custom_error` (templates/nginx.conf.j2).
--
-- A route's generated lane intercepts the listed codes and error_page sends
-- the request here (an internal redirect: ngx.ctx is gone, variables and
-- request headers stay). In the lane, `remember` put the route's error
-- backend and names into one variable, $platform_error (one variable: each
-- one the configuration names costs every request). Here the request goes
-- to the error backend with the path "/" (arguments kept, as ingress-nginx's
-- `rewrite (.*) / break`) and ingress-nginx's headers, set as request
-- headers (X-Request-ID and Host come from the location's proxy_set_header).
local M = {}

local ngx = ngx
local SEP = "|" -- never in a backend or Kubernetes name

--- In the lane (traffic.apply): the route's error backend and names, and
-- the limit-connections key the request holds (router.limits), which the
-- error location's log phase must release (ngx.ctx does not survive the
-- internal redirect).
function M.remember(errors, conn_key)
  ngx.var.platform_error = table.concat({ errors.backend, errors.namespace, errors.ingress, errors.service,
                                          errors.port, conn_key and ngx.encode_base64(conn_key) or "" }, SEP)
end

--- The status being replaced: the last of $upstream_status ("502, 404" after
-- a retry; " : " separates the internal redirect's groups).
function M.code(upstream_status)
  return (upstream_status or ""):match("(%d%d%d)[^%d]*$")
end

--- $platform_error -> backend, namespace, ingress, service, port, base64 connection key ("" none).
function M.parse(value)
  return (value or ""):match("^([^|]+)|([^|]+)|([^|]+)|([^|]+)|([^|]+)|([^|]*)$")
end

function M.route()
  local var = ngx.var
  local backend, namespace, ingress, service, port, conn = M.parse(var.platform_error)
  if backend == nil then
    return ngx.exit(ngx.HTTP_NOT_FOUND)
  end
  if conn ~= "" then
    ngx.ctx.platform_conn = ngx.decode_base64(conn) -- released by router.log()
  end
  local set_header = ngx.req.set_header
  set_header("X-Code", M.code(var.upstream_status) or tostring(ngx.status))
  set_header("X-Format", var.http_accept)
  set_header("X-Original-URI", var.request_uri)
  set_header("X-Namespace", namespace)
  set_header("X-Ingress-Name", ingress)
  set_header("X-Service-Name", service)
  set_header("X-Service-Port", port)
  var.proxy_upstream_name = backend
  ngx.req.set_uri("/")
  return require("balancer").access()
end

return M
