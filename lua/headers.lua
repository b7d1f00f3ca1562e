--- Header programs: request / response header operations, and the parsed
-- snippet subset (set, if, return), run per request from data.
--
-- platformd.ingress.headers builds and validates the program (names are
-- RFC 7230 tokens, values without CR/LF/NUL, variables read only from its
-- allowlist) and ships it in the route's policy ("headers"). Nothing here is
-- generated from user text: the program is a list of tables this module
-- interprets.
--   req_set / req_add / req_remove: the request to the backend, now
--     (ngx.req.set_header / clear_header; `add` appends one more value);
--   res_set / res_add / res_remove: the response to the client, queued in
--     ngx.ctx and applied by the lanes' header_filter (`response()`);
--   var: the program's own variable (a table per request, not ngx.var);
--   return: answer now (a redirect for 301/302/303/307/308);
--   if: a plain comparison of one variable with a value (negate for !=).
-- Header names compare case-insensitively (nginx's header API does).
-- Routes without a program never come here (router.lua checks for nil).
local ngx = ngx
local null = ngx and require("cjson.safe").null

local M = {}

local REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
local OPS = {
  req_set = true, req_add = true, req_remove = true, res_set = true, res_add = true, res_remove = true,
  var = true, ["return"] = true, ["if"] = true,
}
local TOKEN = "^[!#$%%&'*+%-.^_`|~%w]+$"
local NAME = "^[%a_][%w_]*$"

---------------------------------------------------------------------------
-- Checking and compiling (pure; tests/lua/headers_spec.lua)
---------------------------------------------------------------------------

local function fail(path, why)
  error({ path = path, reason = why }, 0)
end

local function check_value(value, path)
  if type(value) ~= "table" then
    fail(path, "must be an array")
  end
  for i, part in ipairs(value) do
    if type(part) == "string" then
      if part:find("[%z\r\n]") then
        fail(path .. "[" .. i .. "]", "must not contain CR, LF or NUL")
      end
    elseif type(part) ~= "table" or type(part.v) ~= "string" or not part.v:match(NAME) then
      fail(path .. "[" .. i .. "]", "must be a string or {v = variable}")
    end
  end
end

local function check_list(list, path, depth)
  if type(list) ~= "table" then
    fail(path, "must be an array")
  end
  for i, s in ipairs(list) do
    local where = path .. "[" .. i .. "]"
    if type(s) ~= "table" or not OPS[s.op] then
      fail(where, "unknown operation")
    end
    if s.op == "return" then
      if type(s.code) ~= "number" or s.code < 200 or s.code > 599 or s.code % 1 ~= 0 then
        fail(where .. ".code", "must be a status 200-599")
      end
    elseif s.op == "var" or s.op == "if" then
      if type(s.name) ~= "string" or not s.name:match(NAME) then
        fail(where .. ".name", "must be a variable name")
      end
    elseif type(s.name) ~= "string" or not s.name:match(TOKEN) then
      fail(where .. ".name", "must be a header name")
    end
    check_value(s.value, where .. ".value")
    if s.op == "if" then
      if depth > 0 then
        fail(where, "an if may not hold another if")
      end
      check_list(s.body, where .. ".body", depth + 1)
    end
  end
end

--- Whether `value` (a policy's "headers", JSON as posted) is a program:
-- true, or nil and "path: reason". util/schema.lua calls it.
function M.check(value, path)
  if value == nil or value == null then
    return true
  end
  local ok, err = pcall(check_list, value, path, 0)
  if not ok then
    return nil, type(err) == "table" and (err.path .. ": " .. err.reason) or tostring(err)
  end
  return true
end

-- A value: a string when it is all literal (most), else its parts.
local function compile_value(value)
  local literal = true
  for _, part in ipairs(value) do
    if type(part) ~= "string" then
      literal = false
      break
    end
  end
  if literal then
    return table.concat(value)
  end
  local parts = {}
  for i, part in ipairs(value) do
    parts[i] = type(part) == "string" and part or { part.v }
  end
  return parts
end

local function compile_list(list)
  local out = {}
  for i, s in ipairs(list) do
    local c = { op = s.op, name = s.name, value = compile_value(s.value), code = s.code, negate = s.negate }
    if s.op == "if" then
      c.body = compile_list(s.body)
    end
    if s.op:sub(1, 4) == "res_" then
      c.lower = s.name:lower()
    end
    out[i] = c
  end
  return out
end

--- A policy's "headers" -> the program `run` takes (nil for none).
function M.compile(value)
  if value == nil or value == null or value[1] == nil then
    return nil
  end
  return compile_list(value)
end

---------------------------------------------------------------------------
-- Per request
---------------------------------------------------------------------------

-- The value of `v` for this request: own variables first, then nginx's
-- (only names the controller allowed reach here).
local function eval(v, own)
  if type(v) == "string" then
    return v
  end
  local buffer = {}
  for i, part in ipairs(v) do
    if type(part) == "string" then
      buffer[i] = part
    else
      local name = part[1]
      local x = own and own[name]
      if x == nil then
        x = ngx.var[name]
      end
      buffer[i] = x or ""
    end
  end
  return table.concat(buffer)
end
M.eval = eval

local function add_request(name, value)
  local current = ngx.req.get_headers(200)[name:lower()]
  if current == nil then
    return ngx.req.set_header(name, value)
  end
  if type(current) == "table" then
    current[#current + 1] = value
  else
    current = { current, value }
  end
  return ngx.req.set_header(name, current)
end

local function answer(code, body)
  if REDIRECT[code] then
    return ngx.redirect(body, code)
  end
  if body == "" and code >= 400 then
    return ngx.exit(code)
  end
  ngx.status = code
  ngx.header["Content-Type"] = "text/plain"
  ngx.print(body)
  return ngx.exit(ngx.HTTP_OK)
end

local function run_list(program, state)
  for i = 1, #program do
    local s = program[i]
    local op = s.op
    if op == "req_set" then
      ngx.req.set_header(s.name, eval(s.value, state.own))
    elseif op == "req_add" then
      add_request(s.name, eval(s.value, state.own))
    elseif op == "req_remove" then
      ngx.req.clear_header(s.name)
    elseif op == "res_set" or op == "res_add" or op == "res_remove" then
      local queue = state.response
      if queue == nil then
        queue = {}
        state.response = queue
        ngx.ctx.platform_response = queue
      end
      queue[#queue + 1] = op
      queue[#queue + 1] = s.name
      queue[#queue + 1] = op ~= "res_remove" and eval(s.value, state.own) or false
    elseif op == "var" then
      local own = state.own
      if own == nil then
        own = {}
        state.own = own
      end
      own[s.name] = eval(s.value, own)
    elseif op == "if" then
      local x = state.own and state.own[s.name]
      if x == nil then
        x = ngx.var[s.name] or ""
      end
      if (x == eval(s.value, state.own)) ~= (s.negate == true) then
        run_list(s.body, state)
      end
    elseif op == "return" then
      return answer(s.code, eval(s.value, state.own))
    end
  end
end

--- Run `program` (from `compile`) for this request: request headers now,
-- response headers queued for `response()`; may end the request (return).
function M.run(program)
  return run_list(program, {})
end

--- header_filter_by_lua of the lanes: apply the queued response operations.
function M.response()
  local queue = ngx.ctx.platform_response
  if queue == nil then
    return
  end
  local header = ngx.header
  for i = 1, #queue, 3 do
    local op, name, value = queue[i], queue[i + 1], queue[i + 2]
    if op == "res_set" then
      header[name] = value
    elseif op == "res_remove" then
      header[name] = nil
    else
      local current = header[name]
      if current == nil then
        header[name] = value
      elseif type(current) == "table" then
        current[#current + 1] = value
        header[name] = current
      else
        header[name] = { current, value }
      end
    end
  end
end

-- Run per change (validation, compilation), not per request: see util/cold.lua.
require("util.cold").functions(M.check, check_value, check_list, M.compile, compile_value, compile_list)

return M
