local endpoint = require("util.endpoint")

describe("util.endpoint", function()
  it("keys IPv4 and bracketed IPv6 endpoints", function()
    assert.equals("10.0.0.1:80", endpoint.key({ address = "10.0.0.1", port = 80 }))
    assert.equals("[fd00::1]:8080", endpoint.key({ address = "fd00::1", port = 8080 }))
  end)
end)
