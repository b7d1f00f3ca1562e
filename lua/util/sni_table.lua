--- One SNI-keyed table of the "routes" section, as a worker sees it.
--
-- Per-host TLS settings are shipped as `{names = {server name = key},
-- <entries> = {key = entry}}` in the section's meta (client_tls: entries
-- "cas"; host_tls: "settings"; built by platformd.ingress.host_claims.sni_table).
-- A table re-reads its part when the section's version moves; `any` says
-- whether any host has settings, so the handshake hooks of a server without
-- any return at once.
local sni = require("util.sni")

local M = {}
local Table = {}
Table.__index = Table

--- `field`: the meta field ("client_tls"); `entries`: the name of its
-- key -> entry table ("cas"). Empty until the first `refresh` or `load`.
function M.new(field, entries)
  return setmetatable({ field = field, entries_field = entries, version = -1,
    names = {}, entries = {}, any = false }, Table)
end

--- Uses `data` (nil: no host has settings) as the section's `version`.
function Table:load(data, version)
  self.names = data and data.names or {}
  self.entries = data and data[self.entries_field] or {}
  self.any = next(self.names) ~= nil
  self.version = version
end

--- Re-reads the table when the "routes" section moved; true if it did.
function Table:refresh()
  local configuration = require("configuration")
  local version = configuration.version("routes")
  if version == self.version then
    return false
  end
  local _, meta = configuration.routes("routes")
  local data = meta and meta[self.field]
  self:load(type(data) == "table" and data or nil, version)
  return true
end

--- The key of the TLS server name `name` (exact, then the wildcard one
-- label up), or nil.
function Table:key_for(name)
  return sni.lookup(self.names, nil, name)
end

return M
