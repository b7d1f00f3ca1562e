--- custom-http-errors (platformd.ingress.custom_errors): the rewrite phase
-- of `@platform_custom_error` (templates/nginx.conf.j2).
--
-- A route's generated lane intercepts the listed codes and error_page sends
-- the request here (an internal redirect: ngx.ctx is gone, variables stay).
-- lua/traffic.lua set $platform_error_* from the route's data in the lane;
-- here the request goes to the error backend with ingress-nginx's headers
-- (the location's proxy_set_header lines read the variables) and the path
-- "/", as ingress-nginx's error locations do.
local M = {}

local ngx = ngx

--- In the lane (traffic.apply): remember the route's error backend and names.
function M.remember(errors)
  local var = ngx.var
  var.platform_error_backend = errors.backend
  var.platform_error_namespace = errors.namespace
  var.platform_error_ingress = errors.ingress
  var.platform_error_service = errors.service
  var.platform_error_port = errors.port
end

--- The status being replaced: the last of $upstream_status ("502, 404" after
-- a retry; " : " separates the internal redirect's groups).
function M.code(upstream_status)
  return (upstream_status or ""):match("(%d%d%d)[^%d]*$")
end

function M.route()
  local var = ngx.var
  local backend = var.platform_error_backend
  if backend == nil or backend == "" then
    return ngx.exit(ngx.HTTP_NOT_FOUND)
  end
  var.platform_error_code = M.code(var.upstream_status) or tostring(ngx.status)
  var.proxy_upstream_name = backend
  ngx.req.set_uri("/")
  return require("balancer").access()
end

return M
