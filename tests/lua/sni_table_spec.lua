-- lua/util/sni_table.lua: the per-worker view of an SNI-keyed table of the
-- "routes" section (client_tls, host_tls).
local sni_table = require("util.sni_table")

describe("util.sni_table", function()
  local section, version
  before_each(function()
    version, section = 1, { client_tls = { names = { ["a.example.com"] = "k1", ["*.w.example.com"] = "k2" },
      cas = { k1 = "one", k2 = "two" } } }
    package.loaded.configuration = {
      version = function(name) assert(name == "routes") return version end,
      routes = function(name) assert(name == "routes") return nil, section end,
    }
  end)
  after_each(function()
    package.loaded.configuration = nil
  end)

  it("is empty before the first refresh, then reads its field", function()
    local t = sni_table.new("client_tls", "cas")
    assert.is_false(t.any)
    assert.is_nil(t:key_for("a.example.com"))
    assert.is_true(t:refresh())
    assert.is_true(t.any)
    assert.equal("k1", t:key_for("A.Example.com."))
    assert.equal("k2", t:key_for("x.w.example.com"))
    assert.is_nil(t:key_for("y.x.w.example.com"))
    assert.equal("two", t.entries.k2)
  end)

  it("re-reads only when the section's version moves", function()
    local t = sni_table.new("client_tls", "cas")
    t:refresh()
    section = { client_tls = { names = { ["b.example.com"] = "k3" }, cas = { k3 = "three" } } }
    assert.is_false(t:refresh())
    assert.equal("k1", t:key_for("a.example.com"))
    version = 2
    assert.is_true(t:refresh())
    assert.is_nil(t:key_for("a.example.com"))
    assert.equal("three", t.entries[t:key_for("b.example.com")])
  end)

  it("treats a missing or non-table field, or no section, as no settings", function()
    local t = sni_table.new("host_tls", "settings")
    t:refresh()
    assert.is_false(t.any)
    assert.same({}, t.entries)
    section, version = nil, 2
    t:refresh()
    assert.is_false(t.any)
    t:load({ names = { ["c.example.com"] = "k" }, settings = { k = {} } }, -2)
    assert.is_true(t.any)
    assert.equal(-2, t.version)
  end)
end)
