local bound = require("bound")

local function host(name)
  return { name = name }
end

local function compile(binds)
  return bound.compile(binds, function(h)
    return h
  end, nil, nil)
end

describe("bound", function()
  it("has no tables when none are sent", function()
    assert.is_nil(compile({}))
    assert.is_nil(compile(nil))
  end)

  local binds = compile({
    { address = "127.0.0.2", port = 80, fallback = true, hosts = { ["a.example"] = host("a"),
      ["*.example"] = host("wild"), ["*.b.example"] = host("b-wild") }, default = host("any2") },
    { address = "127.0.0.3", port = 80, fallback = true, hosts = { ["a.example"] = host("a3") } },
    { port = 18080, fallback = false, hosts = { ["a.example"] = host("mapped") } },
  })

  it("picks the table by local address, then any address, by port", function()
    assert.is_true(binds.addressed)
    assert.equal("a", bound.lookup(bound.table(binds, "127.0.0.2", "80"), "a.example").name)
    assert.equal("a3", bound.lookup(bound.table(binds, "127.0.0.3", "80"), "a.example").name)
    assert.equal("mapped", bound.lookup(bound.table(binds, "127.0.0.2", "18080"), "a.example").name)
    assert.is_nil(bound.table(binds, "127.0.0.1", "80"))
  end)

  it("matches the exact name, then the longest wildcard (one or more labels), then any host", function()
    local t = bound.table(binds, "127.0.0.2", "80")
    assert.equal("b-wild", bound.lookup(t, "x.y.b.example").name)
    assert.equal("wild", bound.lookup(t, "x.y.example").name)
    assert.equal("b-wild", bound.lookup(t, "b.b.example").name)
  end)

  it("falls back to the Ingress table on shared ports and answers 404 on mapped ports", function()
    assert.is_nil(bound.lookup(bound.table(binds, "127.0.0.3", "80"), "other.example"))
    assert.equal(bound.EMPTY, bound.lookup(bound.table(binds, "127.0.0.2", "18080"), "other.example"))
  end)

  it("lets the Ingress names come before its any-host entry on shared ports", function()
    local host, any = bound.lookup(bound.table(binds, "127.0.0.2", "80"), "example")
    assert.is_nil(host)
    assert.equal("any2", any.name)
  end)
end)
