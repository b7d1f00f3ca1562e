package.path = "./tests/lua/?.lua;" .. package.path
local balanced = require("balancer.sticky_balanced")
local persistent = require("balancer.sticky_persistent")
local h = require("helpers")

local function backend(endpoints, mode)
  return {
    name = "b",
    endpoints = endpoints,
    session_affinity = { type = "cookie", mode = mode, cookie = { name = "route", max_age = 60, samesite = "Lax" } },
  }
end

local function cookie_value(request)
  return request.cookies_set[1]:match("^route=([^;]+)")
end

for _, case in ipairs({ { "balanced", balanced }, { "persistent", persistent } }) do
  local mode, module = case[1], case[2]

  describe("balancer.sticky_" .. mode, function()
    it("sets a cookie on the first request and sticks to it", function()
      local b = module.new(backend(h.endpoints(4), mode), h.deps())
      local first = h.request()
      local endpoint = b:balance(first)
      assert.equals(1, #first.cookies_set)
      assert.matches("^route=[%x.]+; Path=/; Max%-Age=60; SameSite=Lax; HttpOnly$", first.cookies_set[1])
      for _ = 1, 20 do
        local again = h.request({}, { route = cookie_value(first) })
        assert.same(endpoint, b:balance(again))
        assert.equals(0, #again.cookies_set)
      end
    end)

    it("spreads new sessions over the endpoints", function()
      local b = module.new(backend(h.endpoints(4), mode), h.deps())
      local counts = h.count(b, 400)
      for i = 1, 4 do
        assert.is_true((counts["10.0.0." .. i .. ":8080"] or 0) > 50)
      end
    end)

    it("moves a session whose endpoint went away", function()
      local all = h.endpoints(3)
      local b = module.new(backend(all, mode), h.deps())
      local first = h.request()
      local gone = b:balance(first)
      local rest = {}
      for _, e in ipairs(all) do
        if e.address ~= gone.address then rest[#rest + 1] = e end
      end
      b:sync(backend(rest, mode))
      local again = h.request({}, { route = cookie_value(first) })
      local now = b:balance(again)
      assert.not_equals(gone.address, now.address)
      -- And sticks to its new endpoint afterwards.
      local cookie = again.cookies_set[1] and cookie_value(again) or cookie_value(first)
      for _ = 1, 5 do
        assert.same(now, b:balance(h.request({}, { route = cookie })))
      end
    end)

    it("knows its own sessions", function()
      local b = module.new(backend(h.endpoints(2), mode), h.deps())
      local first = h.request()
      b:balance(first)
      assert.is_true(b:is_affinitized(h.request({}, { route = cookie_value(first) })))
      assert.is_false(b:is_affinitized(h.request()))
      -- A session of another backend with the same cookie name is not ours.
      local other = module.new({ name = "other", endpoints = { { address = "10.9.9.9", port = 1 } },
        session_affinity = { type = "cookie", mode = mode } }, h.deps())
      local foreign = h.request()
      other:balance(foreign)
      assert.is_false(b:is_affinitized(h.request({}, { route = cookie_value(foreign) })))
    end)

    it("ignores a malformed cookie", function()
      local b = module.new(backend(h.endpoints(2), mode), h.deps())
      local request = h.request({}, { route = "not;valid" })
      assert.is_not_nil(b:balance(request))
      assert.equals(1, #request.cookies_set)
    end)
  end)
end

describe("sticky modes differ when endpoints are added", function()
  local function moved(module, mode)
    local b = module.new(backend(h.endpoints(2), mode), h.deps())
    local sessions = {}
    for i = 1, 200 do
      local request = h.request()
      sessions[i] = { endpoint = b:balance(request), cookie = cookie_value(request) }
    end
    b:sync(backend(h.endpoints(4), mode))
    local n = 0
    for _, s in ipairs(sessions) do
      if b:balance(h.request({}, { route = s.cookie })).address ~= s.endpoint.address then
        n = n + 1
      end
    end
    return n
  end

  it("persistent keeps every session", function()
    assert.equals(0, moved(persistent, "persistent"))
  end)

  it("balanced moves about half of them onto the new endpoints", function()
    local n = moved(balanced, "balanced")
    assert.is_true(n > 60 and n < 140, "moved " .. n)
  end)
end)
