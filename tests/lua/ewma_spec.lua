package.path = "./tests/lua/?.lua;" .. package.path
local ewma = require("balancer.ewma")
local h = require("helpers")

local function serve(b, request, seconds_by_address)
  local endpoint = b:balance(request)
  request.attempts = { { key = endpoint.address .. ":8080", seconds = seconds_by_address[endpoint.address] } }
  b:after_balance(request)
  return endpoint
end

describe("balancer.ewma", function()
  it("prefers the faster endpoint once it has samples", function()
    local deps = h.deps()
    local b = ewma.new({ name = "b", endpoints = h.endpoints(2) }, deps)
    local latency = { ["10.0.0.1"] = 0.200, ["10.0.0.2"] = 0.010 }
    local fast = 0
    for i = 1, 200 do
      deps.clock.advance(0.05)
      if serve(b, h.request(), latency).address == "10.0.0.2" and i > 10 then
        fast = fast + 1
      end
    end
    assert.is_true(fast > 170, "fast endpoint got " .. fast .. " of 190")
  end)

  it("weights the average by in-flight requests", function()
    local deps = h.deps()
    local b = ewma.new({ name = "b", endpoints = h.endpoints(2) }, deps)
    b:record("10.0.0.1:8080", 0.010)
    b:record("10.0.0.2:8080", 0.015)
    -- Two unfinished requests on the faster endpoint make it the worse pick.
    b.in_flight["10.0.0.1:8080"] = 2
    assert.equals("10.0.0.2", b:balance(h.request()).address)
  end)

  it("decays an idle average towards zero", function()
    local deps = h.deps()
    local b = ewma.new({ name = "b", endpoints = h.endpoints(1) }, deps)
    b:record("10.0.0.1:8080", 1.0)
    deps.clock.advance(ewma.DECAY_TIME)
    assert.is_true(math.abs(b:ewma("10.0.0.1:8080") - math.exp(-1)) < 1e-3)
  end)

  it("penalises failed attempts", function()
    local deps = h.deps()
    local b = ewma.new({ name = "b", endpoints = h.endpoints(1) }, deps)
    local request = h.request()
    b:balance(request)
    request.attempts = { { key = "10.0.0.1:8080", seconds = 0.0, failed = true } }
    b:after_balance(request)
    assert.is_true(b:ewma("10.0.0.1:8080") >= ewma.FAILURE_PENALTY * 0.99)
    assert.equals(0, b.in_flight["10.0.0.1:8080"])
  end)

  it("returns nil without endpoints", function()
    assert.is_nil(ewma.new({ name = "b", endpoints = {} }, h.deps()):balance(h.request()))
  end)
end)
