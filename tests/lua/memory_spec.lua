-- lua/memory.lua: each process records its Lua heap as numbers in the dict
-- (in place after the first write), and the report lists them with the
-- dicts' use.
package.path = "./tests/lua/?.lua;" .. package.path
local h = require("helpers")

local function dict(capacity, free)
  local data, writes = {}, {}
  return {
    data = data,
    writes = writes,
    get = function(_, key) return data[key] end,
    safe_set = function(_, key, value)
      writes[#writes + 1] = { key, type(value) }
      data[key] = value
      return true
    end,
    capacity = function() return capacity end,
    free_space = function() return free end,
  }
end

local function dicts()
  return {
    platform_configuration = dict(64 * 2 ^ 20, 60 * 2 ^ 20),
    platform_balancer = dict(16 * 2 ^ 20, 16 * 2 ^ 20 - 4096),
  }
end

-- The module loaded as process `worker` ({id, pid}) of an nginx whose dicts are `shared`.
local function with_memory(worker, fn, shared)
  shared = shared or dicts()
  local printed = {}
  local fake_ngx = {
    shared = shared,
    worker = { id = function() return worker.id end, pid = function() return worker.pid end,
               count = function() return 2 end },
    header = {},
    print = function(body) printed[#printed + 1] = body end,
  }
  h.with_module("memory", fake_ngx, { ["cjson.safe"] = require("cjson.safe") }, fn, shared, printed, worker)
end

describe("memory", function()
  it("records each worker's heap and pid under keys of its own, as numbers", function()
    local worker = { id = 1, pid = 4242 }
    with_memory(worker, function(memory, shared)
      memory.record()
      memory.record()
      local config = shared.platform_configuration
      assert.is_number(config.data["memory:1:kb"])
      assert.equals(4242, config.data["memory:1:pid"])
      -- numbers only: an update replaces 8 bytes in place, never allocates
      for _, write in ipairs(config.writes) do
        assert.equals("number", write[2])
      end
      assert.equals(collectgarbage("count") > 0, config.data["memory:1:kb"] > 0)
    end)
  end)

  it("writes a worker's heap again only when it moved by more than RECORD_KB", function()
    with_memory({ id = 0, pid = 7 }, function(memory, shared)
      local saved, kb = _G.collectgarbage, 1000
      _G.collectgarbage = function(what)
        assert(what == "count", what)
        return kb
      end
      local ok, err = pcall(function()
        local config = shared.platform_configuration
        memory.record()
        assert.equals(5, #config.writes) -- heap, pid, peak, traces and flushes
        kb = 1000 + memory.RECORD_KB
        memory.record()
        assert.equals(5, #config.writes) -- within the step: nothing written
        kb = 1001 + memory.RECORD_KB
        memory.record()
        assert.equals(7, #config.writes) -- the heap and its new peak
        assert.same({ "memory:0:kb", "number" }, config.writes[6])
        assert.equals(1001 + memory.RECORD_KB, config.data["memory:0:peak_kb"])
        assert.equals(1001 + memory.RECORD_KB, config.data["memory:0:kb"])
        kb = 900
        memory.record()
        assert.equals(8, #config.writes) -- the heap; the peak stays
        assert.equals(1001 + memory.RECORD_KB, config.data["memory:0:peak_kb"])
      end)
      _G.collectgarbage = saved
      if not ok then error(err, 0) end
    end)
  end)

  it("reports the master, the workers that recorded (by id) and every dict's capacity and free bytes", function()
    local shared = dicts()
    with_memory({ id = 0, pid = 100 }, function(memory)
      memory.record_master()
      memory.record()
    end, shared)
    with_memory({ id = 1, pid = 101 }, function(memory)
      memory.record()
      local report = memory.report()
      assert.equals(100, report.master.pid) -- the master's record carries its own pid
      assert.same({ 0, 1 }, { report.workers[1].id, report.workers[2].id })
      assert.same({ 100, 101 }, { report.workers[1].pid, report.workers[2].pid })
      assert.same({ capacity = 64 * 2 ^ 20, free = 60 * 2 ^ 20 }, report.dicts.platform_configuration)
      assert.same({ capacity = 16 * 2 ^ 20, free = 16 * 2 ^ 20 - 4096 }, report.dicts.platform_balancer)
      assert.is_nil(report.dicts.platform_limits) -- a dict nginx does not have is left out
    end, shared)
  end)

  it("answers JSON with workers as a list even before any worker recorded", function()
    with_memory({ id = 0, pid = 1 }, function(memory, _, printed)
      memory.call()
      local body = require("cjson.safe").decode(printed[1])
      assert.truthy(printed[1]:find('"workers":[]', 1, true))
      assert.equals(require("cjson.safe").null, body.master)
    end)
  end)

  it("counts the JIT traces a worker compiles and the flushes, written when they change and reported", function()
    with_memory({ id = 1, pid = 7 }, function(memory, shared)
      local saved, attached = _G.jit, {}
      _G.jit = { attach = function(fn, what) attached[#attached + 1] = { fn, what } end }
      local ok, err = pcall(function()
        memory.count_traces()
        assert.equals(1, #attached)
        assert.equals("trace", attached[1][2])
        local on_trace = attached[1][1]
        memory.record()
        local config = shared.platform_configuration
        assert.same({ 0, 0 }, { config.data["memory:1:traces"], config.data["memory:1:flushes"] })
        on_trace("start")
        on_trace("stop")
        on_trace("start")
        on_trace("abort") -- neither a trace nor a flush
        on_trace("stop")
        on_trace("flush")
        memory.record() -- the counts moved: written whether or not the heap did
        assert.same({ 2, 1 }, { config.data["memory:1:traces"], config.data["memory:1:flushes"] })
        local worker = memory.report().workers[1]
        assert.same({ 1, 2, 1 }, { worker.id, worker.traces, worker.flushes })
      end)
      _G.jit = saved
      if not ok then error(err, 0) end
    end)
  end)
end)
