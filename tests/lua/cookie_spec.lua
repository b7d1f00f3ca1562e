local cookie = require("util.cookie")

describe("util.cookie", function()
  it("formats all attributes", function()
    assert.equals("s=v; Path=/app; Max-Age=60; SameSite=None; Secure; HttpOnly",
      cookie.format({ name = "s", path = "/app", max_age = 60, samesite = "None", secure = true }, "v"))
  end)

  it("defaults name and path, omits unset attributes", function()
    assert.equals("route=v; Path=/; HttpOnly", cookie.format({}, "v"))
    assert.equals("route=v; Path=/; HttpOnly", cookie.format(nil, "v"))
  end)
end)
