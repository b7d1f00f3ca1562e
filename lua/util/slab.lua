--- Sizes for large shared-dict values, so that a replaced value's pages are
-- reused by its successor instead of new pages being touched.
--
-- Why: nginx's slab allocator gives a value over half a page whole pages,
-- first fit from the most recently freed run. A section is rewritten as a new
-- key before the old one is deleted, so each change frees a run the next
-- change may reuse, but only if the next value needs no more pages: a value
-- one page longer skips the hole and takes pages further on. Over the first
-- hundreds of route changes each worker so touched (and kept resident) pages
-- of the dict it never needed at once (bench/bench_dataplane.py, route
-- changes: RssShmem 7.8 -> 10.6 MB over 600 changes at 10,000 Ingresses).
-- Values padded to a size class fit any hole of their class, so the pages
-- touched stop at what two versions of each section need.
--
-- Classes: up to 16 pages, powers of two (1, 2, 4, 8, 16 pages: at 10,000
-- Ingresses a route shard is 8-13 KB, so they share one class); above, steps
-- of 1/32 of the power of two below (at most 3.2% more bytes: the dict keeps
-- room for two versions of a large section during a swap).
local M = {}
require("util.cold").module() -- per change, not per request (util/cold.lua)

M.PAGE = 4096
-- Bytes of a value's slab allocation that are not the value: nginx's rbtree
-- node and the dict's node header (~70 bytes on 64-bit) plus the key (our
-- keys stay under 64 bytes).
M.OVERHEAD = 256
-- Below this a value lives in a slot of the slab's own size classes.
M.SMALL = M.PAGE / 2

--- The length to pad a value of `n` bytes to (n itself when small).
function M.class(n)
  if n + M.OVERHEAD <= M.SMALL then
    return n
  end
  local pages = math.ceil((n + M.OVERHEAD) / M.PAGE)
  local size = 1
  while size < pages do
    size = size * 2
  end
  if size > 16 then
    local step = math.max(size / 64, 1) -- 1/32 of the power of two below `size`
    size = math.ceil(pages / step) * step
  end
  return size * M.PAGE - M.OVERHEAD
end

--- `raw` (JSON) padded with spaces to its class: JSON still, to any decoder.
function M.padded(raw)
  local n = #raw
  local size = M.class(n)
  if size == n then
    return raw
  end
  return raw .. string.rep(" ", size - n)
end

return M
