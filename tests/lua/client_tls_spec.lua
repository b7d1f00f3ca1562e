-- lua/client_tls.lua (the pure parts) and the schema of its data.
local client_tls = require("client_tls")
local schema = require("util.schema")

local helpers = require("helpers")

local deps = helpers.schema_deps()

local PEM = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"

local function meta(client)
  return helpers.routes_meta({ client_tls = client })
end

local function host(ct)
  return { hosts = { ["a.example.com"] = { hsts = false, exact = {}, prefix = {}, regex = {}, client_tls = ct } },
           policies = {} }
end

local GOOD = { id = "ab12", verify = "on", error_page = "", pass_certificate = false, match_cn = "CN=a" }

describe("client_tls.verdict", function()
  it("follows nginx's ssl_verify_client modes", function()
    assert.equal("no_cert", client_tls.verdict("on", "NONE"))
    assert.equal("no_cert", client_tls.verdict("on", nil))
    assert.is_nil(client_tls.verdict("on", "SUCCESS"))
    assert.equal("cert_error", client_tls.verdict("on", "FAILED:certificate has expired"))
    assert.is_nil(client_tls.verdict("optional", "NONE"))
    assert.equal("cert_error", client_tls.verdict("optional", "FAILED:unable to get local issuer certificate"))
    assert.is_nil(client_tls.verdict("optional_no_ca", "FAILED:unable to get local issuer certificate"))
    assert.is_nil(client_tls.verdict("optional_no_ca", "FAILED:self-signed certificate"))
    assert.equal("cert_error", client_tls.verdict("optional_no_ca", "FAILED:certificate has expired"))
  end)
end)

describe("client_tls.id_for", function()
  it("finds the policy of an SNI name, wildcards one label deep, nothing for no name", function()
    client_tls.load({ names = { ["a.example.com"] = "11", ["*.w.example.com"] = "22" }, cas = {} })
    assert.equal("11", client_tls.id_for("A.example.com"))
    assert.equal("22", client_tls.id_for("x.w.example.com"))
    assert.is_nil(client_tls.id_for("y.x.w.example.com"))
    assert.is_nil(client_tls.id_for(nil))
    assert.is_nil(client_tls.id_for("other.example.com"))
  end)
end)

describe("schema of client_tls", function()
  it("accepts the controller's data", function()
    assert(schema.validate_routes_meta(meta({ names = { ["a.example.com"] = "ab12" },
                                               cas = { ab12 = { pem = PEM, depth = 1 } } }), deps))
    assert(schema.validate_routes_shard(host(GOOD), deps))
  end)

  it("refuses what the router or the handshake could misread", function()
    local bad_meta = {
      { names = { ["a.example.com"] = "ff" }, cas = { ab12 = { pem = PEM, depth = 1 } } }, -- unknown id
      { names = {}, cas = { ab12 = { pem = "x", depth = 1 } } },
      { names = {}, cas = { ab12 = { pem = PEM, depth = 0 } } },
      { names = { ["a b"] = "ab12" }, cas = { ab12 = { pem = PEM, depth = 1 } } },
      { names = {} },
      { names = {}, cas = { ab12 = 7 } }, -- not an object
    }
    for _, data in ipairs(bad_meta) do
      local out, err = schema.validate_routes_meta(meta(data), deps)
      assert.is_nil(out)
      assert.truthy(err:find("client_tls", 1, true))
    end
    local changes = {
      { verify = "off" }, { verify = "maybe" }, { id = "not hex" }, { match_cn = "CN=(" },
      { error_page = "has space" }, { pass_certificate = "yes" },
    }
    for _, change in ipairs(changes) do
      local ct = {}
      for k, v in pairs(GOOD) do ct[k] = v end
      for k, v in pairs(change) do ct[k] = v end
      local out, err = schema.validate_routes_shard(host(ct), deps)
      assert.is_nil(out)
      assert.truthy(err:find("client_tls", 1, true))
    end
  end)
end)
