--- The router of the catch-all server: hosts with no server block yet.
--
-- A host added since the last reload has no server block, so its requests
-- reach the catch-all server. The controller lists the hosts the router can
-- serve exactly in the "routes" section (platformd.ingress.routes: only
-- hosts whose every location is a plain Exact or Prefix path), so a new
-- host is served after a push instead of after the reload that renders it.
-- Hosts with a server block never get here: the rendered path pays nothing.
--
-- Matching is view.py's for a server without regex paths:
--   * Exact paths match the URI and nothing else, and beat every Prefix;
--   * Prefix "/foo" matches "/foo" and "/foo/..." (not "/foobar"); the
--     longest matching prefix wins; Prefix "/" matches what nothing else does;
--   * no match: 404, as the rendered server's own `location /`.
-- Names: the exact host first, then "*.<rest>" for exactly one label
-- (`~^[^.]+\.rest$` as rendered).
--
-- Per worker, the compiled table follows the section's version, rebuilt on
-- the first request after a change (as balancer.lua does for backends).
local M = {}

--- `data` (validated by util/schema validate_routes) -> compiled routes:
-- `{hosts = {name = host}, redirect_code, port_suffix}` where host is
-- `{hsts, exact = {path = location}, prefixes = {{prefix, location}...}
-- longest first, root = location|nil}` and location is
-- `{backend, ssl_redirect}`.
function M.compile(data)
  local compiled = { hosts = {}, redirect_code = 308, port_suffix = "" }
  if data == nil then
    return compiled
  end
  compiled.redirect_code = data.ssl_redirect.code
  if data.ssl_redirect.port ~= 443 then
    compiled.port_suffix = ":" .. data.ssl_redirect.port
  end
  for name, server in pairs(data.servers) do
    local host = { hsts = server.hsts, exact = {}, prefixes = {} }
    -- Exact paths first, so a Prefix of the same path never takes their
    -- place in `exact` (Kubernetes: Exact beats Prefix).
    for _, loc in ipairs(server.locations) do
      if loc.match == "exact" then
        host.exact[loc.path] = { backend = loc.backend, ssl_redirect = loc.ssl_redirect }
      end
    end
    for _, loc in ipairs(server.locations) do
      if loc.match == "prefix" then
        local location = { backend = loc.backend, ssl_redirect = loc.ssl_redirect }
        if loc.path == "/" then
          host.root = location
        else
          -- Prefix /foo is nginx's `= /foo` plus `/foo/` (view._matches).
          if host.exact[loc.path] == nil then
            host.exact[loc.path] = location
          end
          host.prefixes[#host.prefixes + 1] = { prefix = loc.path .. "/", location = location }
        end
      end
    end
    table.sort(host.prefixes, function(a, b)
      if #a.prefix ~= #b.prefix then
        return #a.prefix > #b.prefix
      end
      return a.prefix < b.prefix
    end)
    compiled.hosts[name] = host
  end
  return compiled
end

--- The host entry serving `name` (lower-case, no port), or nil.
function M.find(compiled, name)
  if name == nil then
    return nil
  end
  local host = compiled.hosts[name]
  if host ~= nil then
    return host
  end
  local rest = name:match("^[^.]+%.(.+)$")
  return rest and compiled.hosts["*." .. rest] or nil
end

--- The location of `host` answering `uri` (nginx's normalised $uri), or nil (404).
function M.match(host, uri)
  local location = host.exact[uri]
  if location ~= nil then
    return location
  end
  for _, entry in ipairs(host.prefixes) do
    if uri:sub(1, #entry.prefix) == entry.prefix then
      return entry.location
    end
  end
  return host.root
end

---------------------------------------------------------------------------
-- nginx glue: `rewrite_by_lua` of the catch-all server (templates/nginx.conf.j2)
---------------------------------------------------------------------------

local changes_now = require("util.changes").current
local state = { version = -1, routes = M.compile(nil) }
local seen_changes = nil -- as in balancer.refresh: skip the dict while no POST came

local function current()
  local changes = changes_now()
  if changes == seen_changes then
    return state.routes
  end
  local configuration = require("configuration")
  if configuration.version("routes") ~= state.version then
    local version, data = configuration.routes()
    state = { version = version, routes = M.compile(data) }
  end
  seen_changes = changes
  return state.routes
end

--- Build this worker's routing table ahead of its first catch-all request.
function M.warm()
  current()
end

--- Serve the request if its host is routed; return to let the catch-all
-- location answer as it would without the router. Routed requests go on in
-- `@platform_router` (a plain location proxying through upstream_balancer)
-- or `@platform_router_404`; the internal redirect comes back here, hence
-- the `is_internal` check.
function M.route()
  if ngx.req.is_internal() then
    return
  end
  local routes = current()
  local var = ngx.var
  local host = M.find(routes, var.host)
  if host == nil then
    return
  end
  if host.hsts then
    var.platform_router_hsts = var.platform_hsts or "" -- set on https only
  end
  local location = M.match(host, var.uri)
  if location == nil then
    return ngx.exec("@platform_router_404")
  end
  var.proxy_upstream_name = location.backend
  if location.ssl_redirect and var.pass_access_scheme == "http" then
    return ngx.redirect("https://" .. var.host .. routes.port_suffix .. var.request_uri, routes.redirect_code)
  end
  return ngx.exec("@platform_router")
end

return M
