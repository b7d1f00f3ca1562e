local redirect = require("redirect")

local function r(fields)
  local payload = { code = 302, scheme = "http", hostname = nil, port = "", path = nil, prefix_length = nil }
  for k, v in pairs(fields) do
    payload[k] = v
  end
  return redirect.compile(payload)
end

describe("redirect.location", function()
  it("keeps the request's host, path and query when the filter names none", function()
    assert.equal("http://a.example/x/y?q=1", redirect.location(r({}), "a.example", "/x/y?q=1", "/x/y", "q=1"))
  end)

  it("puts the scheme, host and port the filter names", function()
    local loc = redirect.location(r({ scheme = "https", hostname = "b.example", port = ":8443" }),
      "a.example", "/p", "/p", nil)
    assert.equal("https://b.example:8443/p", loc)
  end)

  it("replaces the full path and keeps the query", function()
    assert.equal("http://a.example/new?q=1", redirect.location(r({ path = "/new" }), "a.example", "/old?q=1", "/old", "q=1"))
  end)

  it("replaces the matched prefix as the spec's table says", function()
    local cases = {
      -- prefix length, replacement (without trailing /), uri, expected path
      { 4, "/xyz", "/foo/bar", "/xyz/bar" },
      { 4, "/xyz", "/foo", "/xyz" },
      { 4, "/xyz", "/foo/", "/xyz/" },
      { 4, "", "/foo/bar", "/bar" },
      { 4, "", "/foo", "/" },
      { 0, "/xyz", "/bar", "/xyz/bar" },
    }
    for _, c in ipairs(cases) do
      local loc = redirect.location(r({ path = c[2], prefix_length = c[1] }), "h", c[3], c[3], nil)
      assert.equal("http://h" .. c[4], loc)
    end
  end)
end)
