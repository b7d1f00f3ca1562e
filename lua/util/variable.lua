--- Read one nginx variable whose name is fixed when the module loads.
--
-- `ngx.var[name]` copies, lowercases and hashes the name on every read: for
-- "proxy_upstream_name" about 400 CPU instructions (callgrind), a fifth of
-- what the balancer phase of a plain request used to add to nginx's own work.
-- `M.reader(name)` hashes once and then asks nginx's `ngx_http_get_variable`
-- (what ngx.var calls too) with the ready hash. That function and
-- `ngx_variable_value_t` have kept their shape since nginx 0.x. Where its
-- symbols are not exported, on big-endian machines, or outside nginx (no
-- LuaJIT ffi, as in the busted specs) the reader is plain `ngx.var[name]`.
local M = {}

-- ngx_variable_value_t begins with the bit fields len:28, valid:1,
-- no_cacheable:1, not_found:1, escape:1. LuaJIT parses bit fields but cannot
-- read them, so the word is read whole, laid out as C compilers do on
-- little-endian machines (the first field in the lowest bits).
local LEN_MASK = 0x0fffffff
local NOT_FOUND = 0x40000000

local ok_ffi, ffi = pcall(require, "ffi")
local ok_base, base = pcall(require, "resty.core.base")

local C, get_request, ffi_string, band
if ok_ffi and ok_base and base.get_request ~= nil and ffi.abi("le") then
  local declared = pcall(ffi.cdef, [[
    typedef struct {
      uint32_t             bits;
      const unsigned char *data;
    } platform_variable_value_t;
    platform_variable_value_t *ngx_http_get_variable(ngx_http_request_t *r,
        ngx_str_t *name, uintptr_t key);
    uintptr_t ngx_hash_key(const unsigned char *data, size_t len);
  ]])
  local exported = declared and pcall(function()
    return ffi.C.ngx_http_get_variable, ffi.C.ngx_hash_key
  end)
  if exported then
    C, get_request, ffi_string, band = ffi.C, base.get_request, ffi.string, bit.band
  end
end

-- Names a reader's ngx_str_t points into, kept from the garbage collector.
local anchors = {}

--- A function returning the value of `$name` for the current request, or nil
-- when the variable is unknown or not set. Call it in request phases only.
-- `name` must be lower case (nginx's variable hash holds lower-case names).
function M.reader(name)
  assert(name == name:lower(), "variable names are looked up in lower case")
  if C == nil then
    return function()
      return ngx.var[name]
    end
  end
  local key = C.ngx_hash_key(name, #name)
  local str = ffi.new("ngx_str_t", { #name, name })
  anchors[#anchors + 1] = name
  local lookup = C.ngx_http_get_variable
  return function()
    local r = get_request()
    if r == nil then
      error("no request found", 2)
    end
    local value = lookup(r, str, key)
    if value == nil then
      return nil
    end
    local bits = value.bits
    if band(bits, NOT_FOUND) ~= 0 then
      return nil
    end
    return ffi_string(value.data, band(bits, LEN_MASK))
  end
end

return M
