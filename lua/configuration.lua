--- The configuration endpoint and the shared state it writes.
--
-- HTTP (content phase of `location /configuration` on the internal server):
--   POST /configuration/<section>   body {"checksum": "<hex>", "data": ...}
--        201 stored, answering {"checksum", "version"} of the version in
--        force afterwards (ours, unless a later-numbered POST won a race), so
--        the client can confirm without a GET; 400 invalid JSON or schema (nothing changes);
--        413 body over MAX_BODY_BYTES; 507 does not fit the shared dict.
--   POST /configuration/<section>?check=1   validate only: 200 or 400, nothing stored.
--   POST /configuration/backends    body {"checksum", "base": "<hex>",
--        "upsert": [backend...], "remove": [name...]}: a delta on top of the
--        version whose checksum is `base`. Validated as strictly as a full
--        payload (400, nothing changes); 409 when `base` is not the checksum
--        in force or the chain of deltas is MAX_CHAIN long (the client then
--        posts the whole set); else as a full POST.
--   GET  /configuration/<section>   {"version": N, "checksum": ..., "data": ...}
--        (certificates: data is {"servers": {host: id}, "default": id},
--        never PEMs; backends: the whole current set, deltas merged in).
--        Before the first POST: version 0, checksum/data null.
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
--   "backends^<v>"       the chain of version v: "<base> <delta> ... <v>",
--                        base = the last full POST ("backends@<base>"),
--                        each delta d stored as "backends~<d>" (its body)
--   "<v>:<cert id>"      (in platform_certificates) PEM of a certificate of v
-- A POST writes everything of version v under new keys first and only then
-- moves "<section>:version" to v, then deletes the keys of the old version.
-- So a failed write (e.g. dict full) leaves the running version untouched,
-- and a reader sees one whole version: it reads ":version" and then "@<v>";
-- if that key was just deleted by a newer POST it re-reads the version.
-- Backends keep a base plus a chain of deltas, so an endpoint change costs
-- each worker a decode of the change, not of 20,000 backends: a worker that
-- knows a version of the chain applies only the deltas after it
-- (`backends_since`); a fresh worker, or one whose version is no longer in
-- the chain, reads the base and the whole chain. A delta keeps the chain's
-- keys and deletes only the previous version's "#" and "^"; a full POST
-- deletes the previous base and chain once it is in force.
-- POSTs of one section are expected one at a time (the controller serialises
-- them); two concurrent POSTs end with the later-numbered one in force.
local cjson = require("cjson.safe")
local schema = require("util.schema")
local changes = require("util.changes")
local padded = require("util.slab").padded

local M = {}
require("util.cold").module() -- per change, not per request (util/cold.lua)

-- Must match `client_max_body_size` / `client_body_buffer_size` of the
-- internal server in templates/nginx.conf.j2. 32 MiB keeps two versions of
-- the largest payload inside the 64 MiB dict during a swap.
M.MAX_BODY_BYTES = 32 * 1024 * 1024
M.SECTIONS = { backends = true, certificates = true, routes = true }
-- The route table comes in shards (sections routes_0 .. routes_<n-1>, hosts
-- by crc32 of the name, platformd.ingress.routes), so a route change posts,
-- validates and decodes one shard, not the whole table (why 256: see
-- routes.SHARDS). The section "routes" says how many there are; it must be
-- this many (400 otherwise).
M.ROUTE_SHARDS = 256
for i = 0, M.ROUTE_SHARDS - 1 do
  M.SECTIONS["routes_" .. i] = true
end
-- Longest chain of deltas a base carries (409 beyond: post the whole set).
-- The client compacts well before this (platformd.ingress.render,
-- COMPACT_AFTER); this only bounds what a fresh worker has to replay.
M.MAX_CHAIN = 1024

local config = ngx.shared.platform_configuration
local pems = ngx.shared.platform_certificates

-- Whether PCRE compiles `pattern` (as ngx.re would): true, or nil and PCRE's
-- message. Compiled and dropped through the C function ngx.re itself calls
-- (lua-nginx-module's FFI, declared by resty.core.regex), not through
-- ngx.re: its first call in a worker allocates the cache of compiled regexes
-- (16,384 entries, lua_regex_cache_max_entries: ~0.5 MB of Lua heap), which
-- the worker that took the POST needs only if its requests match regexes;
-- and with "o" each pattern validated would take a place in that cache.
local check_regex
do
  local ffi = require("ffi")
  require("resty.core.regex") -- declares the functions
  local C = ffi.C
  local ERR_SIZE = 256
  local err_buf = ffi.new("unsigned char[?]", ERR_SIZE)
  check_regex = function(pattern)
    local compiled = C.ngx_http_lua_ffi_compile_regex(pattern, #pattern, 0, 0, err_buf, ERR_SIZE)
    if compiled == nil then
      return nil, ffi.string(err_buf)
    end
    C.ngx_http_lua_ffi_destroy_regex(compiled)
    return true
  end
end

local SCHEMA_DEPS = {
  null = cjson.null,
  regex_ok = check_regex,
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
SCHEMA_DEPS.cidr_ok = function(text)
  return require("util.cidr").parse(text)
end
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
  changes.init()
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

--- `version, chain` of the backends in force: chain is the list of version
-- numbers from the base to `version` (nil when none).
local function read_chain()
  for _ = 1, 3 do
    local version = M.version("backends")
    if version == 0 then
      return 0, nil
    end
    local raw = config:get("backends^" .. version)
    if raw ~= nil then
      local chain = {}
      for v in raw:gmatch("%d+") do
        chain[#chain + 1] = tonumber(v)
      end
      return version, chain
    end
    -- Deleted by a newer POST between the two reads: try again.
  end
  return 0, nil
end

local function decode_delta(version)
  local raw = config:get("backends~" .. version)
  local body = raw and cjson.decode(raw)
  return body and schema.validate_backends_delta(body, SCHEMA_DEPS)
end

local function decode_base(version)
  local raw = config:get("backends@" .. version)
  local body = raw and cjson.decode(raw)
  return body and schema.validate_backends(body.data, SCHEMA_DEPS)
end

--- The normalised deltas of `chain` after position `from`; nil if one is gone.
local function deltas_after(chain, from)
  local deltas = {}
  for i = from + 1, #chain do
    local delta = decode_delta(chain[i])
    if delta == nil then
      return nil
    end
    deltas[#deltas + 1] = delta
  end
  return deltas
end

--- `version, backends, deltas` for a worker that holds version `known`.
-- When `known` is in the chain in force: backends nil and `deltas` the
-- normalised deltas after it, oldest first ({upsert = {...}, remove = {...}}).
-- Else `backends` is the whole normalised list and deltas nil.
function M.backends_since(known)
  for _ = 1, 3 do
    local version, chain = read_chain()
    if chain == nil then
      return version, {}
    end
    for i = #chain, 1, -1 do
      if chain[i] == known then
        local deltas = deltas_after(chain, i)
        if deltas ~= nil then
          return version, nil, deltas
        end
        break -- compacted meanwhile: read it all
      end
    end
    local base = decode_base(chain[1])
    local deltas = base and deltas_after(chain, 1)
    if deltas ~= nil then
      local index = {}
      for i, backend in ipairs(base) do
        index[backend.name] = i
      end
      for _, delta in ipairs(deltas) do
        for _, name in ipairs(delta.remove) do
          if index[name] then
            base[index[name]] = false
            index[name] = nil
          end
        end
        for _, backend in ipairs(delta.upsert) do
          local at = index[backend.name]
          if at == nil then
            at = #base + 1
            index[backend.name] = at
          end
          base[at] = backend
        end
      end
      local list = {}
      for _, backend in ipairs(base) do
        if backend then
          list[#list + 1] = backend
        end
      end
      return version, list
    end
    -- A newer POST replaced the chain while we read it: read again.
  end
  -- Cannot happen for bodies that passed the POST; never route on garbage.
  ngx.log(ngx.ERR, "backends in force cannot be read")
  return M.version("backends"), {}
end

--- `version, backends` where backends is the whole normalised list (util/schema).
function M.backends()
  local version, list = M.backends_since(nil)
  return version, list
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

-- The routes sections this worker stored from a POST, as it decoded them
-- there (section -> data, and the version): its own router takes them from
-- here instead of copying the padded value out of the dict and decoding it
-- a second time (~35 KB of garbage per shard at 10,000 Ingresses). Taken or
-- dropped at the next read of the section, so at most one per section.
local posted, posted_version = {}, {}

--- `version, data` of a routes section ("routes" or "routes_<n>") as posted
-- (validated then; JSON nulls are cjson.null), nil when none. Not validated
-- again: a worker decodes what changed and router.lua compiles hosts as
-- requested.
function M.routes(section)
  section = section or "routes"
  local mine, mine_version = posted[section], posted_version[section]
  if mine ~= nil then
    posted[section], posted_version[section] = nil, nil
    if M.version(section) == mine_version then
      return mine_version, mine
    end
  end
  local version, raw = read_raw(section)
  if raw == nil then
    return version, nil
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
    changes.signal()
  end
  config:delete(section .. "@" .. obsolete)
  config:delete(section .. "#" .. obsolete)
  if on_drop and obsolete > 0 then
    on_drop(obsolete)
  end
end

local function store_plain(section, version, raw, checksum)
  local ok, err = config:safe_set(section .. "@" .. version, padded(raw))
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
    ok, err = config:safe_set("certificates@" .. version, padded(mapping))
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

-- Backends: a full POST starts a new chain; its publish drops the old one.
local function store_backends(version, raw, checksum)
  local function undo()
    config:delete("backends@" .. version)
    config:delete("backends#" .. version)
  end
  local ok, err = config:safe_set("backends@" .. version, padded(raw))
  if ok then
    ok, err = config:safe_set("backends#" .. version, checksum)
  end
  if ok then
    ok, err = config:safe_set("backends^" .. version, tostring(version))
  end
  if not ok then
    undo()
    return nil, err
  end
  local _, previous_chain = read_chain()
  publish("backends", version, function(obsolete)
    local chain = obsolete == version and { version } or previous_chain or {}
    config:delete("backends^" .. obsolete)
    for i, v in ipairs(chain) do
      config:delete((i == 1 and "backends@" or "backends~") .. v)
    end
  end)
  return true
end

-- A delta on top of `in_force` (whose chain is `chain`): keeps the chain.
local function store_backends_delta(version, raw, checksum, in_force, chain)
  local ok, err = config:safe_set("backends~" .. version, padded(raw))
  if ok then
    ok, err = config:safe_set("backends#" .. version, checksum)
  end
  if ok then
    ok, err = config:safe_set("backends^" .. version, table.concat(chain, " ") .. " " .. version)
  end
  if not ok or M.version("backends") ~= in_force then
    -- Full dict, or another POST won meanwhile: our base is gone.
    config:delete("backends~" .. version)
    config:delete("backends#" .. version)
    config:delete("backends^" .. version)
    return nil, err or "conflict"
  end
  -- Not `publish`: the chain (and the base) of the previous version stay.
  config:replace("backends:version", version)
  changes.signal()
  config:delete("backends#" .. in_force)
  config:delete("backends^" .. in_force)
  return true
end

-- Stores a whole, validated section as `version` (a POST and a restore at start alike).
local function store(section, version, data, raw, checksum)
  if section == "certificates" then
    return store_certificates(version, data, checksum)
  elseif section == "backends" then
    return store_backends(version, raw, checksum)
  end
  return store_plain(section, version, raw, checksum)
end

local function in_force_answer(section)
  -- The checksum key alone: no need to copy the payload out of the dict.
  local in_force = M.version(section)
  local in_force_checksum = config:get(section .. "#" .. in_force)
  return respond(201, { checksum = in_force_checksum or cjson.null, version = in_force })
end

local function post_delta(raw, body)
  if type(body.base) ~= "string" or not body.base:match("^%x+$") then
    return respond(400, { error = "base: must be a hex string" })
  end
  local delta, err = schema.validate_backends_delta(body, SCHEMA_DEPS)
  if delta == nil then
    return respond(400, { error = err })
  end
  local in_force, chain = read_chain()
  local current = chain and config:get("backends#" .. in_force)
  if current ~= body.base then
    return respond(409, { error = "base is not the checksum in force", checksum = current or cjson.null })
  end
  if #chain > M.MAX_CHAIN then
    return respond(409, { error = "chain of deltas too long; post the whole set", checksum = current })
  end
  local version = config:incr("backends:seq", 1)
  if version == nil then
    return respond(500, { error = "configuration counters missing; was platform.init() run?" })
  end
  local ok
  ok, err = store_backends_delta(version, raw, body.checksum, in_force, chain)
  if not ok then
    if err == "conflict" then
      return respond(409, { error = "another POST replaced the base meanwhile" })
    end
    ngx.log(ngx.ERR, "storing backends delta version ", version, " failed: ", err)
    return respond(dict_error(err), { error = "cannot store: " .. tostring(err) })
  end
  return in_force_answer("backends")
end

local VALIDATORS = {
  backends = schema.validate_backends,
  certificates = schema.validate_certificates,
  routes = function(data, deps)
    local meta, err = schema.validate_routes_meta(data, deps)
    if meta ~= nil and meta.shards ~= M.ROUTE_SHARDS then
      return nil, "data.shards: this data plane has " .. M.ROUTE_SHARDS .. " route shards"
    end
    return meta, err
  end,
}
for i = 0, M.ROUTE_SHARDS - 1 do
  VALIDATORS["routes_" .. i] = schema.validate_routes_shard
end

-- The hosts and policies of the last version of each routes shard that
-- passed here, as decoded (weak: kept only while this worker's router still
-- holds them): util/schema takes a new version's hosts that are the same
-- as there without checking them again (validate_routes_shard).
local checked_hosts = setmetatable({}, { __mode = "v" })
local checked_policies = setmetatable({}, { __mode = "v" })

local function checked_before(section)
  local hosts, policies = checked_hosts[section], checked_policies[section]
  if hosts == nil or policies == nil then
    return nil
  end
  return { hosts = hosts, policies = policies }
end

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
  if section == "backends" and body.base ~= nil then
    return post_delta(raw, body)
  end
  if body.data == nil then
    return respond(400, { error = "data: missing" })
  end
  local data
  data, err = VALIDATORS[section](body.data, SCHEMA_DEPS, checked_before(section))
  if data == nil then
    return respond(400, { error = err })
  end
  if ngx.var.arg_check ~= nil then
    -- `POST ...?check=1`: validate only (the controller finds which objects
    -- a refused section owes its error to), nothing is stored.
    return respond(200, { valid = true })
  end
  local version = config:incr(section .. ":seq", 1)
  if version == nil then
    return respond(500, { error = "configuration counters missing; was platform.init() run?" })
  end
  local ok
  ok, err = store(section, version, data, raw, body.checksum)
  if not ok then
    ngx.log(ngx.ERR, "storing ", section, " version ", version, " failed: ", err)
    return respond(dict_error(err), { error = "cannot store: " .. tostring(err) })
  end
  if section ~= "backends" and section ~= "certificates" then
    posted[section], posted_version[section] = body.data, version -- see M.routes
    if section ~= "routes" then
      checked_hosts[section], checked_policies[section] = body.data.hosts, body.data.policies
    end
  end
  return in_force_answer(section)
end

-- cjson encodes an empty table as {}; the arrays of a backend must stay
-- arrays. The pattern cannot match inside a JSON string (quotes there are
-- escaped), and the schema makes these two fields arrays.
local function encode_backend(backend)
  return (cjson.encode(backend):gsub('"endpoints":{}', '"endpoints":[]')
    :gsub('"alternative_backends":{}', '"alternative_backends":[]'))
end

--- GET of backends with deltas in force: the base merged with the chain,
-- sorted by name, as stored (not normalised). Diagnostics only, so the
-- cost of a decode and encode of the whole set is fine here.
local function get_backends()
  for _ = 1, 3 do
    local version, chain = read_chain()
    local checksum = chain and config:get("backends#" .. version)
    if chain == nil then
      break
    end
    local raw = config:get("backends@" .. chain[1])
    if raw ~= nil and #chain == 1 then
      return respond(200, '{"version":' .. version .. "," .. raw:sub(2))
    end
    local base = raw and cjson.decode(raw)
    local by_name, complete = {}, base ~= nil and checksum ~= nil
    for _, backend in ipairs(base and base.data or {}) do
      by_name[backend.name] = backend
    end
    for i = 2, #chain do
      local delta_raw = config:get("backends~" .. chain[i])
      local delta = delta_raw and cjson.decode(delta_raw)
      if delta == nil then
        complete = false
        break
      end
      for _, name in ipairs(delta.remove) do
        by_name[name] = nil
      end
      for _, backend in ipairs(delta.upsert) do
        by_name[backend.name] = backend
      end
    end
    if complete then
      local names = {}
      for name in pairs(by_name) do
        names[#names + 1] = name
      end
      table.sort(names)
      local data = {}
      for i, name in ipairs(names) do
        data[i] = encode_backend(by_name[name])
      end
      return respond(200, '{"version":' .. version .. ',"checksum":' .. cjson.encode(checksum)
        .. ',"data":[' .. table.concat(data, ",") .. "]}")
    end
    -- A newer POST replaced the chain while we read it: read again.
  end
  return respond(200, { version = 0, checksum = cjson.null, data = cjson.null })
end

local function get(section)
  if section == "backends" then
    return get_backends()
  end
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
    -- "#<v>" exists exactly as long as v may be in force (written before,
    -- deleted after the switch); a miss means a newer POST: read again.
    local version, checksum = 0, nil
    for _ = 1, 3 do
      version = M.version(section)
      checksum = version > 0 and config:get(section .. "#" .. version) or nil
      if version == 0 or checksum ~= nil then
        break
      end
    end
    out[section] = { version = checksum and version or 0, checksum = checksum or cjson.null }
  end
  return respond(200, out)
end

local function from_inside()
  local remote = ngx.var.remote_addr
  return remote == nil or remote == "unix:" or remote == "127.0.0.1" or remote == "::1"
end

--- Content handler of `location /configuration`.
--- Master process, at start (init_by_lua): load the sections the controller
-- last had confirmed from `dir` (<section>.json, each a POST body the data
-- plane writes after a confirmed push), so a master that replaced a killed
-- one serves the last applied configuration from its first request instead
-- of 503s until the controller pushes again. Only into an empty dict: a
-- reload keeps the state in force. Each file is validated like a POST; a
-- missing or bad one is skipped (the controller pushes everything to a new
-- master anyway).
function M.restore(dir)
  if dir == nil then
    return
  end
  for section, validate in pairs(VALIDATORS) do
    if M.version(section) == 0 then
      local file = io.open(dir .. "/" .. section .. ".json", "rb")
      local raw = file and file:read("*a")
      if file then
        file:close()
      end
      local body = raw and cjson.decode(raw)
      local data, err
      if type(body) == "table" and type(body.checksum) == "string" and body.data ~= nil then
        data, err = validate(body.data, SCHEMA_DEPS)
      end
      if data ~= nil then
        local version = config:incr(section .. ":seq", 1)
        local ok
        ok, err = store(section, version, data, raw, body.checksum)
        if not ok then
          ngx.log(ngx.WARN, "restoring ", section, " failed: ", err)
        end
      elseif raw ~= nil then
        ngx.log(ngx.WARN, "not restoring ", section, ": ", tostring(err or "malformed file"))
      end
    end
  end
end

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
