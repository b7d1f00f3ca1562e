--- JSON null (cjson's sentinel in posted sections) read as nil. One place
-- for what the route, auth and condition compilers all need; compile time
-- only, never per request.

local null = ngx and require("cjson.safe").null

local M = {}

function M.value(x)
  if x == null then
    return nil
  end
  return x
end

return M
