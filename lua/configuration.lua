--- The configuration endpoint and the shared state it writes.
--
-- HTTP (content phase of `location /configuration` on the internal server):
--   POST /configuration/<section>   body {"checksum": "<hex>", "data": ...}
--        201 stored, answering {"checksum", "version"} of the version in
--        force afterwards (ours, unless a later-numbered POST won a race), so
--        the client can confirm without a GET; 400 invalid JSON or schema (nothing changes);
--        413 body over MAX_BODY_BYTES; 507 does not fit the shared dict.
--   GET  /configuration/<section>   {"version": N, "checksum": ..., "data": ...}
--        (certificates: data is {"servers": {host: id}, "default": id},
--        never PEMs). Before the first POST: version 0, checksum/data null.
--   GET  /configuration             {"<section>": {"checksum", "version"}, ...}
-- Requests that do not come from the unix socket or loopback get 403, as a
-- second line of defence should a template ever expose this location.
--
-- Shared state (dict `platform_configuration`, PEMs in `platform_certificates`):
--   "<section>:version"  the version workers must use (integer, 0 = none)
--   "<section>:seq"      last version number handed out
--   "<section>@<v>"      payload of version v: the request body as posted
--                        (certificates: {"checksum", "data": {servers, default}})
--   "<section>#<v>"      checksum of version v
--   "certificates!<v>"   newline-separated certificate ids of version v
--   "<v>:<cert id>"      (in platform_certificates) PEM of a certificate of v
-- A POST writes everything of version v under new keys first and only then
-- moves "<section>:version" to v, then deletes the keys of the old version.
-- So a failed write (e.g. dict full) leaves the running version untouched,
-- and a reader sees one whole version: it reads ":version" and then "@<v>";
-- if that key was just deleted by a newer POST it re-reads the version.
-- POSTs of one section are expected one at a time (the controller serialises
-- them); two concurrent POSTs end with the later-numbered one in force.
local cjson = require("cjson.safe")
local schema = require("util.schema")

local M = {}

-- Must match `client_max_body_size` / `client_body_buffer_size` of the
-- internal server in templates/nginx.conf.j2. 32 MiB keeps two versions of
-- the largest payload inside the 64 MiB dict during a swap.
M.MAX_BODY_BYTES = 32 * 1024 * 1024
M.SECTIONS = { backends = true, certificates = true, general = true }

local config = ngx.shared.platform_configuration
local pems = ngx.shared.platform_certificates

local SCHEMA_DEPS = {
  null = cjson.null,
  regex_ok = function(pattern)
    local _, _, err = ngx.re.find("", pattern, "jo")
    if err then
      return nil, err
    end
    return true
  end,
  pem_ok = function(pem)
    local ssl = require("ngx.ssl")
    local cert, err = ssl.parse_pem_cert(pem)
    if not cert then
      return nil, "certificate: " .. tostring(err)
    end
    local key
    key, err = ssl.parse_pem_priv_key(pem)
    if not key then
      return nil, "private key: " .. tostring(err)
    end
    return true
  end,
}
M.SCHEMA_DEPS = SCHEMA_DEPS

--- Master process, every (re)load: create the counters once so that later
-- updates replace a number in place. `incr`/`set` that have to allocate may
-- evict other keys when the dict is full (least recently used first), which
-- could throw out the payload in force; in-place updates never allocate.
-- `add` leaves existing counters alone, so a reload keeps the state.
function M.init()
  for section in pairs(M.SECTIONS) do
    config:add(section .. ":seq", 0)
    config:add(section .. ":version", 0)
  end
end

---------------------------------------------------------------------------
-- Reading (any phase, any worker)
---------------------------------------------------------------------------

-- Built once: balancer.lua asks for the backends version on every request,
-- and a concatenation there would build (and hash) a string each time.
local VERSION_KEYS = {}
for section in pairs(M.SECTIONS) do
  VERSION_KEYS[section] = section .. ":version"
end

--- The version in force for `section` (0 before the first POST).
function M.version(section)
  return config:get(VERSION_KEYS[section]) or 0
end

--- `version, raw, checksum` of the version in force; raw is nil when none.
local function read_raw(section)
  for _ = 1, 3 do
    local version = M.version(section)
    if version == 0 then
      return 0, nil, nil
    end
    local raw = config:get(section .. "@" .. version)
    if raw ~= nil then
      return version, raw, config:get(section .. "#" .. version)
    end
    -- Deleted by a newer POST between the two reads: try again.
  end
  return 0, nil, nil
end

--- `version, backends` where backends is the normalised list (util/schema).
function M.backends()
  local version, raw = read_raw("backends")
  if raw == nil then
    return version, {}
  end
  local body = cjson.decode(raw)
  local backends = body and schema.validate_backends(body.data, SCHEMA_DEPS)
  if backends == nil then
    -- Cannot happen for a body that passed the POST; never route on garbage.
    ngx.log(ngx.ERR, "stored backends version ", version, " does not validate")
    return version, {}
  end
  return version, backends
end

--- `version, {servers = {host = id}, default = id|nil}, pem(id) -> string|nil`.
function M.certificates()
  local version, raw = read_raw("certificates")
  if raw == nil then
    return version, { servers = {} }, function() return nil end
  end
  local body = cjson.decode(raw)
  local data = body.data
  if data.default == cjson.null then
    data.default = nil
  end
  return version, data, function(id)
    return pems:get(version .. ":" .. id)
  end
end

--- `version, general settings table` ({} when none).
function M.general()
  local version, raw = read_raw("general")
  if raw == nil then
    return version, {}
  end
  return version, cjson.decode(raw).data
end

---------------------------------------------------------------------------
-- Writing (content phase of the internal server)
---------------------------------------------------------------------------

local function respond(status, body)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  if type(body) == "table" then
    body = cjson.encode(body)
  end
  ngx.print(body)
  return ngx.exit(status)
end

local function read_body()
  local length = tonumber(ngx.var.http_content_length)
  if length and length > M.MAX_BODY_BYTES then
    return nil, 413, "body larger than " .. M.MAX_BODY_BYTES .. " bytes"
  end
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body == nil then
    local path = ngx.req.get_body_file()
    if path == nil then
      return nil, 400, "empty body"
    end
    local file, err = io.open(path, "rb")
    if not file then
      return nil, 500, "cannot read buffered body: " .. tostring(err)
    end
    body = file:read(M.MAX_BODY_BYTES + 1)
    file:close()
  end
  if body == nil or body == "" then
    return nil, 400, "empty body"
  end
  if #body > M.MAX_BODY_BYTES then
    return nil, 413, "body larger than " .. M.MAX_BODY_BYTES .. " bytes"
  end
  return body
end

local function dict_error(err)
  if err == "no memory" then
    return 507
  end
  return 500
end

--- Make version `version` of `section` the one in force and drop the previous one.
local function publish(section, version, on_drop)
  local previous = M.version(section)
  local obsolete = previous
  if previous >= version then
    -- A later POST already won; ours is obsolete: drop it instead.
    obsolete = version
  else
    config:replace(section .. ":version", version)
  end
  config:delete(section .. "@" .. obsolete)
  config:delete(section .. "#" .. obsolete)
  if on_drop and obsolete > 0 then
    on_drop(obsolete)
  end
end

local function store_plain(section, version, raw, checksum)
  local ok, err = config:safe_set(section .. "@" .. version, raw)
  if not ok then
    return nil, err
  end
  ok, err = config:safe_set(section .. "#" .. version, checksum)
  if not ok then
    config:delete(section .. "@" .. version)
    return nil, err
  end
  publish(section, version)
  return true
end

local function drop_pems(version, ids)
  for id in pairs(ids) do
    pems:delete(version .. ":" .. id)
  end
end

-- Certificate ids of each version this worker wrote, so the old PEMs can be
-- deleted without scanning the dict. Another worker may have written the
-- previous version; then we fall back to reading its id list from the dict.
local function stored_ids(version)
  local raw = config:get("certificates!" .. version)
  local ids = {}
  for id in (raw or ""):gmatch("[^\n]+") do
    ids[id] = true
  end
  return ids
end

local function store_certificates(version, certificates, checksum)
  local written = {}
  local function undo()
    drop_pems(version, written)
    config:delete("certificates!" .. version)
    config:delete("certificates@" .. version)
    config:delete("certificates#" .. version)
  end
  local id_list = {}
  for id, pem in pairs(certificates.certificates) do
    local ok, err = pems:safe_set(version .. ":" .. id, pem)
    if not ok then
      undo()
      return nil, err
    end
    written[id] = true
    id_list[#id_list + 1] = id
  end
  local mapping = cjson.encode({
    checksum = checksum,
    data = { servers = certificates.servers, default = certificates.default or cjson.null },
  })
  -- cjson encodes an empty table as {}, which is what "servers" wants.
  local ok, err = config:safe_set("certificates!" .. version, table.concat(id_list, "\n"))
  if ok then
    ok, err = config:safe_set("certificates@" .. version, mapping)
  end
  if ok then
    ok, err = config:safe_set("certificates#" .. version, checksum)
  end
  if not ok then
    undo()
    return nil, err
  end
  publish("certificates", version, function(previous)
    drop_pems(previous, stored_ids(previous))
    config:delete("certificates!" .. previous)
  end)
  return true
end

local VALIDATORS = {
  backends = schema.validate_backends,
  certificates = schema.validate_certificates,
  general = schema.validate_general,
}

local function post(section)
  local raw, status, problem = read_body()
  if raw == nil then
    return respond(status, { error = problem })
  end
  raw = raw:gsub("^%s+", "")
  local body, err = cjson.decode(raw)
  if type(body) ~= "table" then
    return respond(400, { error = "invalid JSON: " .. tostring(err or "not an object") })
  end
  if type(body.checksum) ~= "string" or not body.checksum:match("^%x+$") then
    return respond(400, { error = "checksum: must be a hex string" })
  end
  if body.data == nil then
    return respond(400, { error = "data: missing" })
  end
  local data
  data, err = VALIDATORS[section](body.data, SCHEMA_DEPS)
  if data == nil then
    return respond(400, { error = err })
  end
  local version = config:incr(section .. ":seq", 1)
  if version == nil then
    return respond(500, { error = "configuration counters missing; was platform.init() run?" })
  end
  local ok
  if section == "certificates" then
    ok, err = store_certificates(version, data, body.checksum)
  else
    ok, err = store_plain(section, version, raw, body.checksum)
  end
  if not ok then
    ngx.log(ngx.ERR, "storing ", section, " version ", version, " failed: ", err)
    return respond(dict_error(err), { error = "cannot store: " .. tostring(err) })
  end
  -- The checksum key alone: no need to copy the payload out of the dict.
  local in_force = M.version(section)
  local in_force_checksum = config:get(section .. "#" .. in_force)
  return respond(201, { checksum = in_force_checksum or cjson.null, version = in_force })
end

local function get(section)
  local version, raw = read_raw(section)
  if raw == nil then
    return respond(200, { version = 0, checksum = cjson.null, data = cjson.null })
  end
  -- Splice the version into the stored body instead of re-encoding it: the
  -- client gets exactly the JSON it posted (cjson would turn [] into {}).
  return respond(200, '{"version":' .. version .. "," .. raw:sub(2))
end

local function summary()
  local out = {}
  for section in pairs(M.SECTIONS) do
    local version, raw, checksum = read_raw(section)
    out[section] = { version = version, checksum = raw and checksum or cjson.null }
  end
  return respond(200, out)
end

local function from_inside()
  local remote = ngx.var.remote_addr
  return remote == nil or remote == "unix:" or remote == "127.0.0.1" or remote == "::1"
end

--- Content handler of `location /configuration`.
function M.call()
  if not from_inside() then
    return respond(403, { error = "the configuration endpoint is internal" })
  end
  local uri = ngx.var.uri
  local method = ngx.req.get_method()
  if uri == "/configuration" or uri == "/configuration/" then
    if method ~= "GET" then
      return respond(405, { error = "only GET" })
    end
    return summary()
  end
  local section = uri:match("^/configuration/([%w_]+)/?$")
  if section == nil or not M.SECTIONS[section] then
    return respond(404, { error = "unknown section" })
  end
  if method == "GET" then
    return get(section)
  elseif method == "POST" then
    return post(section)
  end
  return respond(405, { error = "only GET and POST" })
end

return M
