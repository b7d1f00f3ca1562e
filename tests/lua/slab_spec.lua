-- util/slab.lua: large values padded to size classes, so a value's successor
-- fits the pages it freed.
local slab = require("util.slab")
local cjson = require("cjson.safe")

-- Pages nginx's slab allocator gives a value of `n` bytes (with our overhead).
local function pages(n)
  return math.ceil((n + slab.OVERHEAD) / slab.PAGE)
end

describe("util.slab", function()
  it("leaves values that live in slab slots alone", function()
    assert.equals(0, slab.class(0))
    assert.equals(100, slab.class(100))
    assert.equals(slab.SMALL - slab.OVERHEAD, slab.class(slab.SMALL - slab.OVERHEAD))
  end)

  it("rounds up to a power of two of pages up to 16 pages", function()
    for _, case in ipairs({ { 3000, 1 }, { 5000, 2 }, { 9000, 4 }, { 13000, 4 }, { 17000, 8 }, { 60000, 16 } }) do
      local n, class_pages = case[1], case[2]
      assert.equals(class_pages * slab.PAGE - slab.OVERHEAD, slab.class(n), n)
      assert.equals(class_pages, pages(slab.class(n)), n)
    end
  end)

  it("above 16 pages, rounds up to 1/32 of the power of two below: at most 3.2% more", function()
    local n = 100 * slab.PAGE -- 101 pages with the overhead: steps of 2 pages (128 / 64)
    assert.equals(102, pages(slab.class(n)))
    for _, big in ipairs({ 17 * slab.PAGE, 1000 * slab.PAGE + 1, 32 * 2 ^ 20 }) do -- up to the largest body
      assert.is_true(slab.class(big) >= big)
      assert.is_true(pages(slab.class(big)) <= math.ceil(pages(big) * 1.032), big) -- pages nginx would give it anyway
    end
  end)

  it("every size of a class takes the same pages, so any value of the class fits any hole of it", function()
    local seen = {}
    for n = 8000, 16000, 97 do
      seen[pages(slab.class(n))] = true
    end
    assert.same({ [4] = true }, seen) -- 8-16 KB route shards: one class
  end)

  it("pads with spaces: the value decodes to the same JSON and never shrinks", function()
    local raw = cjson.encode({ checksum = "ab", data = { hosts = { ["a.example"] = { exact = {} } } } })

    local long = '{"data":"' .. string.rep("y", 5000) .. '"}'
    for _, text in ipairs({ raw, long }) do
      local padded = slab.padded(text)
      assert.equals(slab.class(#text), #padded)
      assert.equals(text, padded:sub(1, #text))
      assert.truthy(padded:sub(#text + 1):match("^ *$"))
      assert.same(cjson.decode(text), cjson.decode(padded))
    end
    assert.equals(raw, slab.padded(raw)) -- small: unchanged
  end)
end)
