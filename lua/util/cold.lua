--- Code that runs once per configuration change, not per request, stays in
-- LuaJIT's interpreter: reading, validating and storing what the controller
-- posts, decoding a changed section, compiling a host or a backend on first
-- use, building a hash ring, the memory report.
--
-- Why: a trace the JIT records is a GC object (its IR and snapshots) plus
-- machine code, and lives until a flush. Such code runs a few times per
-- change with data of every shape (a branch per field kind, per annotation,
-- per algorithm), so each worker kept recording new traces of it for its
-- first ~1,000 route changes and its heap, and so nginx's RSS, grew with
-- them. Measured at 10,000 Ingresses, 1,000 mixed route changes, 2 workers
-- (bench/bench_dataplane.py, route changes, a CI run beside it): JIT on
-- everywhere, ~130 traces per worker and RSS +7.8 / +8.4 %; JIT off in the
-- workers altogether, +5.2 % and a change to its first request faster (p50
-- 16.7 vs 19.3 ms: code run once gains nothing from compiling); this code
-- interpreted, 10-45 traces. The request path keeps the JIT: marking only
-- the per-change code keeps its instructions per request (49,750).
local M = {}

local function off(recursive, ...)
  if jit == nil then
    return
  end
  for i = 1, select("#", ...) do
    jit.off((select(i, ...)), recursive)
  end
end

--- Interpret the functions given and the functions defined in them (a
-- sort's comparator, a loop's helper).
function M.functions(...)
  off(true, ...)
end

--- Interpret only the functions' own bytecode: a closure they create runs
-- per request (router.assemble's lookup of a host not cached yet).
function M.own(...)
  off(false, ...)
end

--- Interpret the whole module that calls this: its main chunk and every
-- function defined in it.
function M.module()
  if jit == nil then
    return
  end
  jit.off(debug.getinfo(2, "f").func, true)
end

return M
