-- util/variable.lua outside nginx: no LuaJIT ffi here, so a reader is plain
-- ngx.var. The ffi path (nginx's own lookup with a precomputed hash) serves
-- every plain request in tests/ingress/test_lua_nginx.py.
local variable = require("util.variable")

describe("util.variable", function()
  local saved_ngx

  before_each(function()
    saved_ngx = _G.ngx
    _G.ngx = { var = { proxy_upstream_name = "ns-app-80" } }
  end)

  after_each(function()
    _G.ngx = saved_ngx
  end)

  it("reads the variable of the current request on each call", function()
    local read = variable.reader("proxy_upstream_name")
    assert.equals("ns-app-80", read())
    ngx.var.proxy_upstream_name = "ns-other-80"
    assert.equals("ns-other-80", read())
  end)

  it("gives nil for a variable that is not set", function()
    assert.is_nil(variable.reader("not_set_here")())
  end)

  it("refuses names nginx could never find", function()
    assert.has_error(function()
      variable.reader("Proxy_Upstream_Name")
    end, "variable names are looked up in lower case")
  end)
end)
