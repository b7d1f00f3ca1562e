local traffic = require("traffic")
local custom_errors = require("custom_errors")
local chash_subset = require("balancer.chash_subset")
local samesite = require("util.samesite")
local cookie = require("util.cookie")

local function failing()
  local problems = {}
  return problems, function(path, problem)
    problems[#problems + 1] = path .. ": " .. problem
    error(problems[#problems], 0)
  end
end

describe("traffic", function()
  it("compiles nothing for a policy without traffic settings", function()
    assert.is_nil(traffic.compile(nil))
    assert.is_nil(traffic.compile(false))
  end)

  it("compiles the settings it applies", function()
    local c = traffic.compile({ forwarded_prefix = "/p", connection = "close", limit_rate = 1024, retries = 0,
                                rewrite_log = true })
    assert.are.equal("/p", c.forwarded_prefix)
    assert.are.equal("close", c.connection)
    assert.are.equal(1024, c.limit_rate)
    assert.are.equal(0, c.retries)
    assert.is_true(c.rewrite_log)
    assert.is_nil(traffic.compile({ limit_rate = 0 }).limit_rate)
  end)

  it("refuses values that could end or expand a variable", function()
    for _, bad in ipairs({ "/a;b", "/$x", "/a{", "/a\"", "/a\n" }) do
      local _, fail = failing()
      assert.has_error(function()
        traffic.check({ forwarded_prefix = bad }, "p", fail)
      end)
    end
    local _, fail = failing()
    assert.has_error(function()
      traffic.check({ connection = "a;b" }, "p", fail)
    end)
    assert.has_error(function()
      traffic.check({ retries = -1 }, "p", fail)
    end)
    assert.has_error(function()
      traffic.check({ errors = { backend = "b;x", namespace = "n", ingress = "i", service = "s", port = "80" } }, "p", fail)
    end)
    traffic.check({ forwarded_prefix = "/shop", connection = "keep-alive", retries = 2 }, "p", fail)
  end)

  it("drops one trailing slash from https redirects unless asked to keep it", function()
    assert.are.equal("/dir", traffic.redirect_uri(nil, "/dir/"))
    assert.are.equal("", traffic.redirect_uri(nil, "/"))
    assert.are.equal("/dir/?a=1", traffic.redirect_uri(nil, "/dir/?a=1"))
    assert.are.equal("/dir/", traffic.redirect_uri({ preserve_trailing_slash = true }, "/dir/"))
  end)
end)

describe("custom_errors", function()
  it("reads back what the lane remembered", function()
    local backend, namespace, ingress, service, port, conn = custom_errors.parse("ns.errors.80|ns|web|svc|80|")
    assert.are.same({ "ns.errors.80", "ns", "web", "svc", "80", "" },
                    { backend, namespace, ingress, service, port, conn })
    assert.are.equal("a2V5", select(6, custom_errors.parse("b|n|i|s|80|a2V5")))
    assert.is_nil(custom_errors.parse(""))
    assert.is_nil(custom_errors.parse("a|b"))
  end)

  it("takes the last upstream status", function()
    assert.are.equal("404", custom_errors.code("404"))
    assert.are.equal("503", custom_errors.code("502, 503"))
    assert.are.equal("404", custom_errors.code("502 : 404"))
    assert.is_nil(custom_errors.code(nil))
  end)
end)

describe("chash_subset", function()
  local function endpoints(n)
    local out = {}
    for i = 1, n do
      out[i] = { address = "10.0.0." .. i, port = 80 }
    end
    return out
  end

  it("cuts endpoints into equal subsets, topping up the last from the start", function()
    local subsets = chash_subset.subsets(endpoints(7), 3)
    assert.are.equal(3, #subsets)
    for _, s in ipairs(subsets) do
      assert.are.equal(3, #s.members)
    end
    assert.are.equal("10.0.0.7", subsets[3].members[1].address)
    assert.are.equal("10.0.0.1", subsets[3].members[2].address)
    assert.are.equal("10.0.0.2", subsets[3].members[3].address)
  end)

  it("keeps a key within one subset", function()
    local n = 0
    local b = chash_subset.new({ endpoints = endpoints(9), upstream_hash_by = "$arg_k",
                                 upstream_hash_by_subset_size = 3 },
                               { random = function(m) n = n % m + 1; return n end })
    local request = { var = function() return "user-42" end }
    local seen = {}
    for _ = 1, 30 do
      seen[b:balance(request).address] = true
    end
    local count = 0
    for _ in pairs(seen) do
      count = count + 1
    end
    assert.are.equal(3, count)
  end)
end)

describe("samesite", function()
  it("knows the clients that mishandle SameSite=None", function()
    assert.is_false(samesite.none_compatible(
      "Mozilla/5.0 (iPhone; CPU iPhone OS 12_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.0 Mobile/15E148 Safari/604.1"))
    assert.is_false(samesite.none_compatible(
      "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.1.2 Safari/605.1.15"))
    assert.is_false(samesite.none_compatible(
      "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/60.0.3112.113 Safari/537.36"))
    assert.is_false(samesite.none_compatible("Mozilla/5.0 (Linux; U; Android 8.0.0) UCBrowser/12.10.8.1172 Mobile"))
    assert.is_true(samesite.none_compatible(
      "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"))
    assert.is_true(samesite.none_compatible(
      "Mozilla/5.0 (iPhone; CPU iPhone OS 13_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.0 Mobile/15E148 Safari/604.1"))
    assert.is_true(samesite.none_compatible("Mozilla/5.0 (Linux; U; Android 8.0.0) UCBrowser/12.13.2.1172 Mobile"))
    assert.is_true(samesite.none_compatible(nil))
  end)
end)

describe("cookie attributes", function()
  after_each(function()
    cookie.now, cookie.cookie_time, cookie.tls, cookie.user_agent = nil, nil, nil, nil
  end)

  it("writes Domain, Expires, Secure and a conditional SameSite=None", function()
    cookie.now = function() return 1000 end
    cookie.cookie_time = function(t) return "T" .. t end
    cookie.tls = function() return true end
    cookie.user_agent = function() return "Mozilla/5.0 Chrome/60.0.1 Safari/537.36" end
    local header = cookie.format({ name = "r", domain = ".example.com", expires = 60, samesite = "None",
                                   conditional_samesite_none = true }, "v")
    assert.are.equal("r=v; Path=/; Domain=.example.com; Expires=T1060; Secure; HttpOnly", header)
    cookie.user_agent = function() return "Mozilla/5.0 Chrome/120.0.1 Safari/537.36" end
    cookie.tls = function() return false end
    header = cookie.format({ name = "r", samesite = "None", conditional_samesite_none = true }, "v")
    assert.are.equal("r=v; Path=/; SameSite=None; HttpOnly", header)
  end)
end)
