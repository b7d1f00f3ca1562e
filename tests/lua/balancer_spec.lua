-- balancer.lua is the nginx edge; here we load it with a tiny ngx stub to
-- check the registry and the algorithm choice. Its phase behaviour is covered
-- against real nginx in tests/ingress/test_lua_nginx.py.
package.path = "./tests/lua/?.lua;" .. package.path
local h = require("helpers")

local function with_stubbed_ngx(fn)
  local stubs = {
    ["ngx.balancer"] = {},
    configuration = { version = function() return 0 end, backends = function() return 0, {} end },
  }
  local fake_ngx = { shared = { platform_balancer = h.store() }, now = function() return 0 end, var = {}, ctx = {} }
  h.with_module("balancer", fake_ngx, stubs, fn)
end

describe("balancer registry", function()
  it("chooses the algorithm in the documented order", function()
    with_stubbed_ngx(function(balancer)
      assert.equals("round_robin", balancer.algorithm_for({}))
      assert.equals("ewma", balancer.algorithm_for({ load_balance = "ewma" }))
      assert.equals("sticky_persistent", balancer.algorithm_for({
        load_balance = "ewma", session_affinity = { type = "cookie", mode = "persistent" } }))
      assert.equals("sticky_balanced", balancer.algorithm_for({ session_affinity = { type = "cookie" } }))
      assert.equals("chash", balancer.algorithm_for({
        upstream_hash_by = "$uri", session_affinity = { type = "cookie" } }))
    end)
  end)

  it("needs the access phase only for canaries, cookie affinity and EWMA", function()
    -- Decided here only: the router sends such routes to a lane with the access and log phases.
    with_stubbed_ngx(function(balancer)
      local function needs(backend)
        return balancer.needs_access(backend, balancer.algorithm_for(backend))
      end
      assert.is_false(needs({ alternative_backends = {} }))
      assert.is_false(needs({ load_balance = "round_robin" }))
      assert.is_false(needs({ upstream_hash_by = "$uri", session_affinity = { type = "cookie" } }))
      assert.is_true(needs({ load_balance = "ewma" }))
      assert.is_true(needs({ session_affinity = { type = "cookie", mode = "persistent" } }))
      assert.is_true(needs({ alternative_backends = { "canary" } }))
    end)
  end)

  it("registers modules that share one interface", function()
    with_stubbed_ngx(function(balancer)
      for name, module in pairs(balancer.registry) do
        assert.equals(name, module.name)
        local backend = {
          name = "b", endpoints = h.endpoints(2), upstream_hash_by = "$uri",
          session_affinity = { type = "cookie", cookie = {} },
        }
        local instance = module.new(backend, h.deps())
        instance:sync(backend)
        assert.is_table(instance:balance(h.request({ uri = "/" })))
        instance:sync({ name = "b", endpoints = {}, upstream_hash_by = "$uri" })
        assert.is_nil(instance:balance(h.request({ uri = "/" })))
      end
    end)
  end)
end)
