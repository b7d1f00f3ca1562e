-- balancer.lua's per-worker state: a delta rebuilds only the entries it
-- names; a worker without a known version rebuilds everything. The shared
-- dict side (configuration.backends_since) is stubbed: it is covered against
-- real nginx in tests/ingress/test_dataplane_delta.py.
package.path = "./tests/lua/?.lua;" .. package.path
local h = require("helpers")

local function backend(name, n)
  return { name = name, endpoints = h.endpoints(n or 2), alternative_backends = {} }
end

-- Loads balancer.lua against a fake configuration whose answers the spec sets:
-- `shared.version`, and `shared.answer(known) -> version, list, deltas`.
-- The change counter (util/changes.lua) moves with every version unless a
-- spec sets `shared.changes` itself.
local function with_balancer(fn)
  local shared = { version = 0, asked = {} }
  local peers = {}
  local stubs = {
    ["ngx.balancer"] = {
      set_current_peer = function(address, port) peers[#peers + 1] = address .. ":" .. port return true end,
      set_more_tries = function() return true end,
      get_last_failure = function() return nil end,
    },
    ["util.changes"] = {
      current = function() return shared.changes or shared.version end,
    },
    configuration = {
      version = function() return shared.version end,
      backends_since = function(known)
        shared.asked[#shared.asked + 1] = known
        return shared.answer(known)
      end,
    },
  }
  local fake_ngx = { shared = { platform_balancer = h.store() }, now = function() return 0 end, var = {}, ctx = {},
                     log = function() end, exit = function() end, ERR = 1, INFO = 2, WARN = 3, ERROR = -1 }
  h.with_module("balancer", fake_ngx, stubs, fn, shared, peers)
end

local function request(balancer, name)
  ngx.var.proxy_upstream_name = name
  balancer.balance()
end

describe("balancer state", function()
  it("warm builds the state before any request", function()
    with_balancer(function(balancer, shared, peers)
      shared.version = 3
      shared.answer = function() return 3, { backend("a") } end
      balancer.warm()
      assert.same({ -1 }, shared.asked)
      assert.is_table(balancer._entries().a)
      request(balancer, "a")
      assert.same({ -1 }, shared.asked) -- the first request found it built
      assert.equals(1, #peers)
    end)
  end)

  it("rebuilds everything when it knows no version, then applies only deltas", function()
    with_balancer(function(balancer, shared, peers)
      shared.version = 5
      shared.answer = function() return 5, { backend("a"), backend("b"), backend("c") } end
      request(balancer, "a")
      assert.same({ -1 }, shared.asked) -- a fresh worker asks with no version
      local entries = balancer._entries()
      local a, b, c = entries.a, entries.b, entries.c
      assert.is_table(a and b and c)

      shared.version = 6
      shared.answer = function(known)
        assert.equals(5, known)
        return 6, nil, { { upsert = { backend("b", 3), backend("d") }, remove = { "c" } } }
      end
      request(balancer, "a")
      entries = balancer._entries()
      assert.equals(a, entries.a) -- untouched
      assert.are_not.equal(b, entries.b)
      assert.equals(b.instance, entries.b.instance) -- same algorithm: synced, position kept
      assert.equals(3, #entries.b.backend.endpoints)
      assert.is_nil(entries.c)
      assert.is_table(entries.d)
      assert.equals(2, #peers)
    end)
  end)

  it("keeps round-robin positions across a delta of another backend", function()
    with_balancer(function(balancer, shared, peers)
      shared.version = 1
      shared.answer = function() return 1, { backend("a", 3), backend("b") } end
      request(balancer, "a")
      request(balancer, "a")
      shared.version = 2
      shared.answer = function() return 2, nil, { { upsert = { backend("b", 1) }, remove = {} } } end
      request(balancer, "a")
      -- Three picks in a row over three endpoints: every endpoint once.
      table.sort(peers)
      assert.same({ "10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080" }, peers)
    end)
  end)

  it("rebuilds whole when the chain no longer holds its version", function()
    with_balancer(function(balancer, shared)
      shared.version = 1
      shared.answer = function() return 1, { backend("a"), backend("b") } end
      request(balancer, "a")
      local a = balancer._entries().a
      shared.version = 9
      shared.answer = function() return 9, { backend("a") } end
      request(balancer, "a")
      local entries = balancer._entries()
      assert.is_nil(entries.b)
      assert.are_not.equal(a, entries.a)
      assert.equals(a.instance, entries.a.instance) -- instances survive a rebuild too
    end)
  end)

  it("reads the shared version only after the change counter moved", function()
    with_balancer(function(balancer, shared)
      shared.changes = 100
      shared.version = 1
      shared.answer = function() return 1, { backend("a") } end
      request(balancer, "a")
      assert.same({ -1 }, shared.asked)
      -- A version moved but its signal has not come yet: the dict is not read.
      shared.version = 2
      shared.answer = function() return 2, { backend("a"), backend("b") } end
      request(balancer, "a")
      assert.same({ -1 }, shared.asked)
      assert.is_nil(balancer._entries().b)
      -- The signal: caught up on the next request.
      shared.changes = 101
      request(balancer, "a")
      assert.same({ -1, 1 }, shared.asked)
      assert.is_table(balancer._entries().b)
    end)
  end)

  it("asks again after a failed refresh even if the counter did not move", function()
    with_balancer(function(balancer, shared)
      shared.changes = 7
      shared.version = 1
      local calls = 0
      shared.answer = function()
        calls = calls + 1
        if calls == 1 then
          error("dict gone mid-read")
        end
        return 1, { backend("a") }
      end
      assert.has_error(function() request(balancer, "a") end)
      request(balancer, "a")
      assert.equals(2, calls)
      assert.is_table(balancer._entries().a)
    end)
  end)
end)
