local sni = require("util.sni")

describe("util.sni", function()
  local servers = { ["example.com"] = "exact", ["*.example.com"] = "wild", ["a.b.example.com"] = "deep" }

  it("prefers the exact name, case-insensitively", function()
    assert.equals("exact", sni.lookup(servers, "def", "Example.COM"))
    assert.equals("deep", sni.lookup(servers, "def", "a.b.example.com"))
  end)

  it("falls back to the wildcard one level up", function()
    assert.equals("wild", sni.lookup(servers, "def", "www.example.com"))
    assert.equals("wild", sni.lookup(servers, "def", "www.example.com."))
  end)

  it("does not let a wildcard cover two levels or the bare domain's parent", function()
    assert.equals("def", sni.lookup(servers, "def", "x.y.example.com"))
    assert.equals("def", sni.lookup(servers, "def", "com"))
  end)

  it("uses the default without SNI or match", function()
    assert.equals("def", sni.lookup(servers, "def", nil))
    assert.equals("def", sni.lookup(servers, "def", "other.org"))
    assert.is_nil(sni.lookup(servers, nil, "other.org"))
  end)
end)
