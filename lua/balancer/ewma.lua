--- Peak-EWMA balancing with "power of two choices".
--
-- For every endpoint we keep an exponentially weighted moving average of its
-- response time. A pick draws two distinct endpoints at random and takes the
-- one with the lower score `ewma * (in_flight + 1)`, where `in_flight` counts
-- this worker's requests to it that have not reached the log phase yet.
--
-- Constants (seconds):
--   DECAY_TIME = 10   time constant of the average: a sample `dt` seconds after
--                     the previous one has weight 1 - exp(-dt / DECAY_TIME), and
--                     an average nobody updates decays towards 0 with the same
--                     time constant. So a slow endpoint is not starved forever:
--                     after a few DECAY_TIMEs it looks cheap again and is
--                     probed; if it is still slow, one sample puts it back.
--   FAILURE_PENALTY = 1   sample recorded for an attempt that failed before a
--                     response (connection refused/reset, timeout). Without it
--                     a refusing endpoint, failing in ~0 ms, would look fastest.
-- New endpoints start at 0 so they are tried at once.
--
-- The averages live in a shared store (`deps.store`, the `platform_balancer`
-- shared dict in nginx) so all workers learn from each other; each value is one
-- string "<ewma> <updated_at>" so the pair is read and written together. The
-- read-modify-write is not atomic across workers: two concurrent samples may
-- lose one of them, which only delays learning by one request.
local endpoint_key = require("util.endpoint").key

local M = {}
M.name = "ewma"
M.DECAY_TIME = 10
M.FAILURE_PENALTY = 1

local mt = { __index = M }

function M.new(backend, deps)
  local self = setmetatable({
    random = deps.random,
    store = deps.store,
    now = deps.now,
    in_flight = {},
  }, mt)
  self:sync(backend)
  return self
end

function M:sync(backend)
  self.prefix = "ewma:" .. backend.name .. ":"
  self.endpoints = backend.endpoints or {}
  local live = {}
  for _, endpoint in ipairs(self.endpoints) do
    live[endpoint_key(endpoint)] = true
  end
  for key in pairs(self.in_flight) do
    if not live[key] then
      self.in_flight[key] = nil
    end
  end
end

local function decode(value)
  if value == nil then
    return 0, nil
  end
  local ewma, at = value:match("^(%S+) (%S+)$")
  return tonumber(ewma) or 0, tonumber(at)
end

--- The current average for `key`, decayed to now.
function M:ewma(key)
  local ewma, at = decode(self.store:get(self.prefix .. key))
  if at == nil then
    return 0
  end
  local dt = math.max(self.now() - at, 0)
  return ewma * math.exp(-dt / M.DECAY_TIME)
end

--- Fold one response-time sample (seconds) into the average for `key`.
function M:record(key, sample)
  local now = self.now()
  local ewma, at = decode(self.store:get(self.prefix .. key))
  local value
  if at == nil then
    value = sample
  else
    local weight = math.exp(-math.max(now - at, 0) / M.DECAY_TIME)
    value = ewma * weight + sample * (1 - weight)
  end
  self.store:set(self.prefix .. key, string.format("%.6f %.3f", value, now))
end

function M:score(endpoint)
  local key = endpoint_key(endpoint)
  return self:ewma(key) * ((self.in_flight[key] or 0) + 1)
end

function M:balance(request)
  local endpoints = self.endpoints
  local n = #endpoints
  if n == 0 then
    return nil
  end
  local chosen = endpoints[1]
  if n > 1 then
    local i = self.random(n)
    local j = self.random(n - 1)
    if j >= i then
      j = j + 1
    end
    local a, b = endpoints[i], endpoints[j]
    chosen = self:score(b) < self:score(a) and b or a
  end
  local key = endpoint_key(chosen)
  self.in_flight[key] = (self.in_flight[key] or 0) + 1
  if request then
    request.ewma_picked = key
  end
  return chosen
end

--- Log phase. `request.attempts` lists every upstream tried, in order, as
-- `{key = "addr:port", seconds = <response time or nil>, failed = bool}`.
function M:after_balance(request)
  local picked = request.ewma_picked
  if picked and self.in_flight[picked] then
    self.in_flight[picked] = math.max(self.in_flight[picked] - 1, 0)
  end
  for _, attempt in ipairs(request.attempts or {}) do
    local sample = attempt.seconds
    if attempt.failed then
      sample = math.max(sample or 0, M.FAILURE_PENALTY)
    end
    if sample then
      self:record(attempt.key, sample)
    end
  end
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.new, M.sync)

return M
