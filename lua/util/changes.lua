--- A change counter every worker can read for the price of a memory load.
--
-- Why: the balancer asks "did the backends move?" on every request. Asking
-- the shared dict costs about 630 CPU instructions (FFI call, the zone's
-- lock, a CRC32 of the key, a tree walk, an LRU update): half of what our Lua
-- adds to a plain request (bench/bench_dataplane.py). A counter in a page of
-- memory shared by all workers answers the same question with one load; the
-- dict is read only when the counter moved.
--
-- Contract: `M.signal()` is called after a POST moved a "<section>:version"
-- key in the dict (never before); `M.current()` then returns a value other
-- than any it returned before that signal. A reader that remembers c =
-- current(), reads the dict and later gets current() == c may skip the dict:
-- no version moved after its read. Why that holds even for two POSTs signalled
-- at once by two workers: every signal stores a value of its own (an atomic
-- `incr` of the dict key "changes"), so later stores never bring back a value
-- a reader has seen. Only equality is compared, so wrapping is harmless.
--
-- Where the page comes from: an anonymous MAP_SHARED mapping made when the
-- module is loaded in the master (init_by_lua, see platform.init), inherited
-- by the workers it forks. A reload makes a new master Lua VM and so a new
-- page for the new workers; the old VM's page is unmapped when that VM is
-- closed. Workers of the previous generation keep their page and stop seeing
-- signals, which costs nothing: they only finish requests already balanced.
-- Without LuaJIT's ffi (the busted specs), outside the init phase (a page
-- mapped after the fork would be private to one worker), or when mmap fails,
-- `current()` reads the "changes" key of the dict instead: correct, just the
-- price this module saves.
local M = {}

local KEY = "changes"
local WRAP = 2 ^ 30 -- values stored in the page stay within int32

local function dict()
  return ngx.shared.platform_configuration
end

local page -- int32_t[1] in shared memory, or nil

local function map_page()
  local in_init = ngx ~= nil and ngx.get_phase ~= nil and ngx.get_phase() == "init"
  local ok_ffi, ffi = pcall(require, "ffi")
  if not (in_init and ok_ffi and ffi.os == "Linux") then
    return nil
  end
  pcall(ffi.cdef, [[
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
    int munmap(void *addr, size_t length);
  ]])
  local PROT_READ, PROT_WRITE = 0x1, 0x2
  local MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20 -- Linux, x86 and arm
  local SIZE = 4096
  local C = ffi.C
  local raw = C.mmap(nil, SIZE, PROT_READ + PROT_WRITE, MAP_SHARED + MAP_ANONYMOUS, -1, 0)
  if raw == nil or ffi.cast("intptr_t", raw) == -1 then
    ngx.log(ngx.WARN, "no shared change counter (mmap failed): workers read the dict per request")
    return nil
  end
  raw = ffi.gc(raw, function(p)
    C.munmap(p, SIZE)
  end)
  M._anchor = raw -- unmapped only when this Lua VM is closed
  local counter = ffi.cast("volatile int32_t *", raw)
  counter[0] = -1 -- never a value `signal` stores
  return counter
end

page = map_page()

--- Record that a version moved (call after replacing "<section>:version").
function M.signal()
  local n, err = dict():incr(KEY, 1, 0)
  if n == nil then
    -- The key is created at init and updated in place, so this is not
    -- expected; the dict read path would then see nothing either, so say so.
    ngx.log(ngx.ERR, "cannot count a configuration change: ", err)
    return
  end
  if page ~= nil then
    page[0] = n % WRAP
  end
end

--- A value that changes whenever `signal` was called (see the contract).
if page ~= nil then
  function M.current()
    return page[0]
  end
else
  function M.current()
    return dict():get(KEY)
  end
end

--- Master, every (re)load: create the dict key so that `incr` updates it in
-- place (see configuration.init on why nothing may allocate later).
function M.init()
  dict():add(KEY, 0)
end

--- Whether the shared page is in use (else `current` reads the dict).
function M.shared_page()
  return page ~= nil
end

return M
