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
