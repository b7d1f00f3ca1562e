--- Source address ranges (allow/deny lists) matched against
-- $binary_remote_addr (4 bytes for IPv4, 16 for IPv6), as nginx's access
-- module does. Ranges are compiled once per routes version; a match is a
-- string compare of the whole bytes plus one masked byte (by division:
-- plain arithmetic, so the specs run on any Lua).
local floor = math.floor

local M = {}

local function ipv4_bytes(text)
  local a, b, c, d = text:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if a == nil then
    return nil
  end
  local parts = { tonumber(a), tonumber(b), tonumber(c), tonumber(d) }
  for _, p in ipairs(parts) do
    if p > 255 then
      return nil
    end
  end
  return string.char(parts[1], parts[2], parts[3], parts[4])
end

local function ipv6_bytes(text)
  -- "a:b::c" -> 8 groups; an embedded IPv4 tail is accepted too.
  local head, tail = text:match("^(.-)::(.*)$")
  local groups = {}
  local function add(list, part)
    if part == "" then
      return true
    end
    for group in (part .. ":"):gmatch("([^:]*):") do
      if group:find("%.") then
        local v4 = ipv4_bytes(group)
        if v4 == nil then
          return false
        end
        list[#list + 1] = v4:byte(1) * 256 + v4:byte(2)
        list[#list + 1] = v4:byte(3) * 256 + v4:byte(4)
      else
        if not group:match("^%x%x?%x?%x?$") then
          return false
        end
        list[#list + 1] = tonumber(group, 16)
      end
    end
    return true
  end
  if head ~= nil then
    local left, right = {}, {}
    if not add(left, head) or not add(right, tail) or #left + #right > 7 then
      return nil
    end
    for _, g in ipairs(left) do
      groups[#groups + 1] = g
    end
    for _ = 1, 8 - #left - #right do
      groups[#groups + 1] = 0
    end
    for _, g in ipairs(right) do
      groups[#groups + 1] = g
    end
  elseif not add(groups, text) or #groups ~= 8 then
    return nil
  end
  local out = {}
  for i, g in ipairs(groups) do
    out[2 * i - 1] = string.char(math.floor(g / 256))
    out[2 * i] = string.char(g % 256)
  end
  return table.concat(out)
end

--- "10.0.0.0/8" or "2001:db8::/32" (canonical, as the controller sends them)
-- -> {bytes = <network prefix, whole bytes>, size = 4|16, last = index of
-- the partly masked byte or nil, shift, value}; nil, err when malformed.
function M.parse(text)
  local address, bits = text:match("^([^/]+)/(%d+)$")
  address = address or text
  local raw = ipv4_bytes(address) or ipv6_bytes(address)
  if raw == nil then
    return nil, "not an IP address or CIDR: " .. text
  end
  local size = #raw
  bits = tonumber(bits) or size * 8
  if bits > size * 8 then
    return nil, "prefix length too long: " .. text
  end
  local whole = math.floor(bits / 8)
  local rest = bits % 8
  local range = { bytes = raw:sub(1, whole), whole = whole, size = size }
  if rest > 0 then
    range.last = whole + 1
    range.shift = 2 ^ (8 - rest)
    range.value = floor(raw:byte(whole + 1) / range.shift)
  end
  return range
end

--- Whether the binary address `addr` lies in one of the compiled `ranges`.
function M.contains(ranges, addr)
  local size = #addr
  for i = 1, #ranges do
    local r = ranges[i]
    if r.size == size and (r.whole == 0 or addr:sub(1, r.whole) == r.bytes)
        and (r.last == nil or floor(addr:byte(r.last) / r.shift) == r.value) then
      return true
    end
  end
  return false
end

--- A list of texts -> compiled ranges, or nil, err.
function M.compile(list)
  local out = {}
  for i, text in ipairs(list) do
    local range, err = M.parse(text)
    if range == nil then
      return nil, err
    end
    out[i] = range
  end
  return out
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(ipv4_bytes, ipv6_bytes, M.parse, M.compile)

return M
