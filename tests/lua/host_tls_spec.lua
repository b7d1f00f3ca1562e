-- lua/host_tls.lua (the lookup) and the schema of its data.
local host_tls = require("host_tls")
local schema = require("util.schema")

local helpers = require("helpers")

local deps = helpers.schema_deps()

local function meta(data)
  return helpers.routes_meta({ host_tls = data })
end

describe("host_tls.key_for", function()
  it("finds the settings of an SNI name, wildcards one label deep", function()
    host_tls.load({ names = { ["a.example.com"] = "aa", ["*.w.example.com"] = "bb" }, settings = {} })
    assert.equal("aa", host_tls.key_for("A.example.com."))
    assert.equal("bb", host_tls.key_for("x.w.example.com"))
    assert.is_nil(host_tls.key_for("y.x.w.example.com"))
    assert.is_nil(host_tls.key_for(nil))
  end)
end)

describe("schema of host_tls", function()
  it("accepts the controller's data and refuses the rest", function()
    local good = { names = { ["a.example.com"] = "aa" }, settings = { aa = { ciphers = "HIGH:!aNULL", prefer = "off" } } }
    assert(schema.validate_routes_meta(meta(good), deps))
    local bad = {
      { names = { ["a.example.com"] = "bb" }, settings = { aa = { ciphers = "", prefer = "" } } },
      { names = {}, settings = { aa = { ciphers = "HIGH; x", prefer = "" } } },
      { names = {}, settings = { aa = { ciphers = "", prefer = "maybe" } } },
      { names = {}, settings = { zz = { ciphers = "", prefer = "" } } },
    }
    for _, data in ipairs(bad) do
      local out, err = schema.validate_routes_meta(meta(data), deps)
      assert.is_nil(out)
      assert.truthy(err:find("host_tls", 1, true))
    end
  end)
end)
