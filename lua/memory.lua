--- What nginx's memory holds, as Lua sees it: each process's Lua heap and
-- the use of each shared dict. Read by bench/bench_dataplane.py (route
-- changes) beside /proc, so growth of nginx's RSS can be told apart: Lua
-- heaps (garbage of replaced versions, the allocator's peak) vs shared-dict
-- pages touched for the first time.
--
-- HTTP (content phase of `location = /memory` on the internal server):
--   GET /memory  {"master": {"pid", "lua_kb"},
--                 "workers": [{"id", "pid", "lua_kb", "peak_kb", "traces", "flushes"}, ...],
--                 "dicts": {"<name>": {"capacity", "free"}, ...}}
--   lua_kb: collectgarbage("count") as the process last recorded it: the
--   master at the end of init_by_lua, each worker on a warm-up tick
--   (platform.WARM_INTERVAL) when its heap moved by more than RECORD_KB since
--   it last wrote it, so within that of the heap 0.2 s ago. It includes
--   garbage not yet collected. peak_kb: the largest lua_kb a worker's ticks
--   saw (LuaJIT's allocator keeps the pages of its peak: the workers'
--   anonymous RSS follows this, not lua_kb). traces/flushes: how many JIT traces this
--   worker has compiled and how many times LuaJIT flushed them all (mcode
--   area full, trace limit), counted from jit.attach: a count that keeps
--   rising with route changes means code re-recorded per change (new
--   machine code), a flush means every trace is recorded anew.
--   capacity/free: bytes (ngx.shared.DICT:capacity and
--   free_space: whole free pages; a page holding any key counts as used).
--
-- Recorded into the dict `platform_configuration` as numbers under keys of
-- their own ("memory:<id>:kb", "memory:<id>:pid", id "master" for the master),
-- so that after the first write every update replaces 8 bytes in place: no
-- allocation, no eviction, no work on any request's path.
local cjson = require("cjson.safe")

local M = {}
require("util.cold").module() -- per change, not per request (util/cold.lua)

M.DICTS = { "platform_configuration", "platform_certificates", "platform_balancer",
            "platform_limits", "platform_auth" }

local function store()
  return ngx.shared.platform_configuration
end

local function keys(id)
  return "memory:" .. id .. ":kb", "memory:" .. id .. ":pid"
end

-- A tick writes the dict only when the heap moved by more than this: an idle
-- worker's tick then costs a comparison, not two dict writes (the tick runs
-- in the same process as the requests bench/instructions.py counts).
M.RECORD_KB = 64

local worker_kb_key -- this worker's key, built once
local recorded_kb = nil -- what this worker last wrote
local peak_kb = 0 -- the largest heap a tick saw

-- JIT events of this process (jit.attach; absent where the VM has no JIT).
local traces, flushes = 0, 0
local recorded_traces = nil

local function on_trace(what)
  if what == "stop" then
    traces = traces + 1
  elseif what == "flush" then
    flushes = flushes + 1
  end
end

--- Each worker, once: count the traces it compiles (on_trace). The callback
-- runs only while LuaJIT records a trace, never on a request's compiled path.
function M.count_traces()
  if jit ~= nil and jit.attach ~= nil then
    jit.attach(on_trace, "trace")
  end
end

local function record(kb_key, pid_key, kb)
  local dict = store()
  dict:safe_set(kb_key, kb)
  dict:safe_set(pid_key, ngx.worker.pid())
end

--- Master, at the end of init_by_lua: its heap as the workers inherit it.
function M.record_master()
  local kb_key, pid_key = keys("master")
  record(kb_key, pid_key, collectgarbage("count"))
end

--- Each worker, from the warm-up timer.
function M.record()
  local kb = collectgarbage("count")
  if recorded_kb ~= nil and math.abs(kb - recorded_kb) <= M.RECORD_KB
      and traces + flushes == recorded_traces then
    return
  end
  local id = ngx.worker.id() or 0
  if worker_kb_key == nil then
    local pid_key
    worker_kb_key, pid_key = keys(id)
    record(worker_kb_key, pid_key, kb) -- the pid once
  else
    store():safe_set(worker_kb_key, kb)
  end
  if kb > peak_kb then
    peak_kb = kb
    store():safe_set("memory:" .. id .. ":peak_kb", kb)
  end
  if traces + flushes ~= recorded_traces then
    store():safe_set("memory:" .. id .. ":traces", traces)
    store():safe_set("memory:" .. id .. ":flushes", flushes)
    recorded_traces = traces + flushes
  end
  recorded_kb = kb
end

local function entry(id)
  local kb_key, pid_key = keys(id)
  local dict = store()
  local kb, pid = dict:get(kb_key), dict:get(pid_key)
  if kb == nil then
    return nil
  end
  return { pid = pid, lua_kb = kb }
end

--- The report as a table (see the header).
function M.report()
  local workers = {}
  for id = 0, ngx.worker.count() - 1 do
    local e = entry(id)
    if e ~= nil then
      e.id = id
      e.peak_kb = store():get("memory:" .. id .. ":peak_kb")
      e.traces = store():get("memory:" .. id .. ":traces") or 0
      e.flushes = store():get("memory:" .. id .. ":flushes") or 0
      workers[#workers + 1] = e
    end
  end
  local dicts = {}
  for _, name in ipairs(M.DICTS) do
    local dict = ngx.shared[name]
    if dict ~= nil then
      dicts[name] = { capacity = dict:capacity(), free = dict:free_space() }
    end
  end
  return { master = entry("master") or cjson.null, workers = workers, dicts = dicts }
end

--- Content handler of `location = /memory` (internal server only).
function M.call()
  ngx.header["Content-Type"] = "application/json"
  local report = M.report()
  -- cjson encodes an empty table as {}; "workers" is a list.
  local body = cjson.encode(report)
  if report.workers[1] == nil then
    body = body:gsub('"workers":{}', '"workers":[]')
  end
  ngx.print(body)
end

return M
