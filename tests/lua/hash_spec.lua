package.path = "./tests/lua/?.lua;" .. package.path
local hash = require("util.hash")

describe("util.hash", function()
  it("computes the standard CRC-32", function()
    assert.equals(0xCBF43926, hash.crc32("123456789"))
    assert.equals(0, hash.crc32(""))
  end)

  it("gives 16 hex characters per digest, different per input", function()
    local a, b = hash.digest("10.0.0.1:80"), hash.digest("10.0.0.2:80")
    assert.matches("^%x+$", a)
    assert.equals(16, #a)
    assert.not_equals(a, b)
    assert.equals(a, hash.digest("10.0.0.1:80"))
  end)
end)

describe("util.hash without a bit library (plain Lua 5.1)", function()
  it("gives the same results", function()
    local saved = { package.loaded.bit, package.loaded.bit32, package.loaded["util.hash"] }
    local saved_preload = { package.preload.bit, package.preload.bit32 }
    package.loaded.bit, package.loaded.bit32, package.loaded["util.hash"] = nil, nil, nil
    package.preload.bit = function() error("absent") end
    package.preload.bit32 = function() error("absent") end
    local ok, fallback = pcall(require, "util.hash")
    package.loaded.bit, package.loaded.bit32, package.loaded["util.hash"] = saved[1], saved[2], saved[3]
    package.preload.bit, package.preload.bit32 = saved_preload[1], saved_preload[2]
    assert.is_true(ok, tostring(fallback))
    for _, s in ipairs({ "", "123456789", "10.0.0.1:8080#17", string.rep("\255", 9) }) do
      assert.equals(hash.crc32(s), fallback.crc32(s))
      assert.equals(hash.digest(s), fallback.digest(s))
    end
  end)
end)
