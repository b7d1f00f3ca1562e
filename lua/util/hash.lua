--- Hash functions that give the same answer under LuaJIT (inside nginx) and
-- under plain Lua 5.1/5.2 (busted), so ring positions computed in unit tests
-- are the ones the data plane uses.
--
-- `crc32(s)` is the standard CRC-32 (IEEE 802.3, as zlib and
-- `ngx.crc32_long`) returned as a non-negative integer below 2^32.
-- `digest(s)` is a 64-bit identifier written as 16 hex characters, used where
-- a value must identify one endpoint among many without exposing its address
-- (sticky cookies). It is two CRC-32s over differently salted input: not a
-- cryptographic hash, only collision-resistant enough for endpoint sets.
local M = {}

local bxor, band, rshift
do
  -- LuaJIT ships `bit` (signed results), Lua 5.2 ships `bit32` (unsigned).
  -- Every result below is normalised with `% 2^32`, so either works.
  -- Plain Lua 5.1 has neither: fall back to arithmetic on non-negative
  -- integers below 2^32 (slow, but only unit tests ever take this path).
  local ok, lib = pcall(require, "bit")
  if not ok then
    ok, lib = pcall(require, "bit32")
  end
  if ok then
    bxor, band, rshift = lib.bxor, lib.band, lib.rshift
  else
    local floor = math.floor
    bxor = function(a, b)
      local result, bitval = 0, 1
      a, b = a % 4294967296, b % 4294967296
      while a > 0 or b > 0 do
        local x, y = a % 2, b % 2
        if x ~= y then
          result = result + bitval
        end
        a, b, bitval = floor(a / 2), floor(b / 2), bitval * 2
      end
      return result
    end
    band = function(a, mask) -- only ever used with mask 0xFF
      return (a % 4294967296) % (mask + 1)
    end
    rshift = function(a, n)
      return floor((a % 4294967296) / 2 ^ n)
    end
  end
end

local TWO32 = 4294967296
local byte = string.byte
local format = string.format

local TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if c % 2 == 1 then
      c = bxor(rshift(c, 1), 0xEDB88320) % TWO32
    else
      c = rshift(c, 1) % TWO32
    end
  end
  TABLE[i] = c
end

function M.crc32(s)
  local crc = 0xFFFFFFFF
  for i = 1, #s do
    local idx = band(bxor(crc, byte(s, i)), 0xFF) % 256
    crc = bxor(rshift(crc, 8), TABLE[idx]) % TWO32
  end
  return bxor(crc, 0xFFFFFFFF) % TWO32
end

function M.digest(s)
  return format("%08x%08x", M.crc32(s), M.crc32("platform:" .. s))
end

return M
