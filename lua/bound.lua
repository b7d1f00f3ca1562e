--- Gateway route tables of one local address and port.
--
-- Two Gateways with identical listeners (same port, no hostname) differ only
-- by the local address a request arrives on, and a listener on a mapped port
-- (--gateway-listener-port) serves only its own routes. The controller sends
-- such tables as the "binds" of the routes meta section
-- (platformd.ingress.bound); the router asks `find` first, and only when the
-- section has any (no pool and no mapped port: no work at all):
--   table: "<local address> <local port>", else "* <local port>"; none: the
--          Ingress table decides (nil);
--   host:  the exact name, else the longest wildcard suffix ("*.example.com"
--          covers one or more labels, as Gateway API says); on --http-port /
--          --https-port ("fallback") then the Ingress table's names, so a
--          name is matched by specificity across both APIs; then the
--          listener without hostname ("*"); then the Ingress catch-all
--          (fallback) or 404 (a mapped port).
-- $server_addr costs a getsockname() on wildcard listens: it is read only
-- when some table names an address (a pool is configured).
local reader = require("util.variable").reader

local var_server_addr = reader("server_addr")
local var_server_port = reader("server_port")

local sub = string.sub
local find = string.find

local M = {}

-- Every path answers 404: a mapped port's name that no listener has.
M.EMPTY = { exact = {}, prefix = {}, longest = 0 }

--- The raw "binds" list -> {by_address = {[address] = {[port] = table}},
-- any_address = {[port] = table}, addressed = bool}, or nil when there is
-- none; ports are keyed as strings, as $server_port reads (no string is
-- built per request). `compile_host(raw, policies)` is the router's.
function M.compile(binds, compile_host, policies, null)
  if binds == nil or binds == null or binds[1] == nil then
    return nil
  end
  local out = { by_address = {}, any_address = {}, addressed = false }
  for _, b in ipairs(binds) do
    local address = b.address
    if address == null then
      address = nil
    end
    local t = { hosts = {}, fallback = b.fallback, default = nil }
    for name, h in pairs(b.hosts) do
      t.hosts[name] = compile_host(h, policies)
    end
    if b.default ~= nil and b.default ~= null then
      t.default = compile_host(b.default, policies)
    end
    local port = tostring(b.port)
    if address ~= nil then
      out.addressed = true
      out.by_address[address] = out.by_address[address] or {}
      out.by_address[address][port] = t
    else
      out.any_address[port] = t
    end
  end
  return out
end

--- The host of `t` serving `name` (lower-case, no port), or nil and the
-- table's "*" host (nil: none) when the Ingress table's names come first.
function M.lookup(t, name)
  if name ~= nil then
    local hosts = t.hosts
    local host = hosts[name]
    if host ~= nil then
      return host
    end
    local dot = find(name, ".", 1, true)
    while dot ~= nil do
      host = hosts["*" .. sub(name, dot)]
      if host ~= nil then
        return host
      end
      dot = find(name, ".", dot + 1, true)
    end
  end
  if t.fallback then
    return nil, t.default
  end
  return t.default or M.EMPTY
end

--- The table for local `address` and `port` (strings), or nil.
function M.table(binds, address, port)
  if address ~= nil then
    local ports = binds.by_address[address]
    local t = ports and ports[port]
    if t ~= nil then
      return t
    end
  end
  return binds.any_address[port]
end

--- The host serving this request's `name`, or nil (and the "*" host to take
-- before the Ingress catch-all): the Ingress table's names decide.
function M.find(binds, name)
  local t = M.table(binds, binds.addressed and var_server_addr() or nil, var_server_port())
  if t == nil then
    return nil
  end
  return M.lookup(t, name)
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.compile)

return M
