-- What a route change leaves behind in a worker's Lua heap (docs/architecture.md,
-- "nginx memory across route changes"): the refresh path (router.refresh, as
-- nginx runs it on the first request or warm-up tick after a POST) reads
-- and compiles only the shards whose version moved, and keeps everything
-- else, so a one-shard change's garbage stays in proportion to that shard,
-- not to the table or to the number of hosts requests have asked for.
local cjson = require("cjson")
local router = require("router")

local SHARDS, PER_SHARD = 256, 40

-- Host names carry their shard, so the spec's hash needs no crc32.
router.hash = function(name)
  return tonumber(name:match("^h(%d+)%-")) or 0
end

local POLICY = {
  fast = true, lane = "@platform_proxy_off", scheme = "http", body_size = 1048576, timeouts = { 5, 60, 60 },
  upstream_vhost = "", ssl_redirect = false, allow = {}, deny = {},
  limit_rps = 0, limit_burst = 0, limit_connections = 0,
}

local function host_entry(backend)
  return { hsts = false, exact = {}, prefix = { ["/"] = { backend = backend, policy = "aa" } }, regex = {} }
end

-- JSON as the controller posts it (nulls left out: outside nginx the router
-- reads cjson.null as a value).
local function shard_json(shard, count, extra)
  local hosts = {}
  for j = 1, count do
    hosts["h" .. shard .. "-" .. j .. ".example"] = host_entry("ns-svc-" .. shard .. "-" .. j .. "-80")
  end
  if extra then
    hosts["h" .. shard .. "-" .. extra .. ".example"] = host_entry("ns-new-" .. extra .. "-80")
  end
  return cjson.encode({ hosts = hosts, policies = { aa = POLICY } })
end

local META = cjson.encode({
  default = host_entry("upstream-default-backend"), policies = { aa = POLICY },
  hsts = "max-age=1", ssl_redirect = { code = 308, port = 443 }, shards = SHARDS,
})

-- A fake configuration dict: section -> {version, json}; `read` decodes as
-- configuration.routes does (the JSON string is what the dict hands out).
local function setup()
  local store, sections = { routes = { 1, META } }, {}
  for i = 1, SHARDS do
    sections[i] = "routes_" .. (i - 1)
    store[sections[i]] = { 1, shard_json(i - 1, PER_SHARD) }
  end
  local state = { meta_version = -1, meta = nil, versions = {}, shards = {}, routes = router.compile(nil) }
  local function version_of(section)
    return store[section][1]
  end
  local function read(section)
    return cjson.decode(store[section][2])
  end
  local function refresh()
    return router.refresh(state, version_of, read, sections)
  end
  return store, state, refresh
end

-- Every host name, built once (a name built per lookup would be garbage of its own).
local NAMES = {}
for shard = 0, SHARDS - 1 do
  for j = 1, PER_SHARD do
    NAMES[#NAMES + 1] = "h" .. shard .. "-" .. j .. ".example"
  end
end

local function ask(routes)
  for i = 1, #NAMES do
    router.find(routes, NAMES[i])
  end
end

-- KB allocated by `fn` (the collector stopped, so nothing is freed meanwhile).
local function allocated(fn)
  collectgarbage("collect")
  collectgarbage("stop")
  local before = collectgarbage("count")
  fn()
  local kb = collectgarbage("count") - before
  collectgarbage("restart")
  return kb
end

describe("router.refresh: a change's garbage", function()
  it("reads only the changed shard and keeps the other shards' compiled hosts", function()
    local store, _, refresh = setup()
    local routes = refresh()
    local other = router.find(routes, "h9-3.example")
    local changed = router.find(routes, "h7-3.example")
    assert.equals("ns-svc-9-3-80", other.root.backend)
    store.routes_7 = { 2, shard_json(7, PER_SHARD - 5, 99) } -- h7-36..40 removed, h7-99 added
    local after = refresh()
    assert.equals(other, router.find(after, "h9-3.example")) -- same compiled host, not rebuilt
    assert.are_not.equal(changed, router.find(after, "h7-3.example")) -- the new version's
    assert.equals("ns-new-99-80", router.find(after, "h7-99.example").root.backend)
    -- A removed host is not served from the cache of found hosts: the catch-all answers.
    assert.equals(after.default, router.find(after, "h7-40.example"))
    assert.equals(routes.default, after.default) -- meta unchanged: its compiled parts kept
  end)

  it("recompiles the catch-all when the meta section moves, and keeps the host cache", function()
    local store, _, refresh = setup()
    local routes = refresh()
    local host = router.find(routes, "h1-1.example")
    store.routes = { 2, META:gsub("max%-age=1", "max-age=2") }
    local after = refresh()
    assert.equals("max-age=2", after.hsts)
    assert.are_not.equal(routes.default, after.default)
    assert.equals(host, router.find(after, "h1-1.example"))
  end)

  it("allocates for a one-shard change about what the shard is, whatever the table and the traffic", function()
    local store, state, refresh = setup()
    ask(refresh()) -- requests have found every one of the 10,240 hosts
    local json, json_before = shard_json(7, PER_SHARD, 99), store.routes_7[2]
    local version = 1
    local function change()
      version = version + 1
      store.routes_7 = { version, version % 2 == 0 and json or json_before }
      refresh()
      ask(state.routes) -- and find them all again
    end
    change() -- the first change sizes the tables that stay
    local kb = allocated(change)
    -- What the shard itself costs: its decode and its 41 hosts compiled.
    local shard_kb = allocated(function()
      local shard = router.compile_shard(cjson.decode(json))
      for name in pairs(shard.names) do
        local _ = shard.hosts[name]
      end
    end)
    -- Rebuilding the cache of found hosts per change (as before router.refresh
    -- kept it) allocated ~720 KB here: ten times the shard, growing with the
    -- hosts asked for.
    assert.is_true(kb < 2 * shard_kb + 8,
      ("one-shard change allocated %.1f KB; the shard alone %.1f KB"):format(kb, shard_kb))
  end)
end)
