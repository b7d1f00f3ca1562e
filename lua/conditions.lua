--- Gateway API matches beyond the path: conditions on headers, query
-- parameters and the method, and the walk that picks a route when some
-- routes have them.
--
-- Data (platformd.ingress.route_choice, docs/architecture.md): a route may
-- carry `when` = {headers = {{name, value, regex}}, query = {...}, method}
-- (all must hold) and `next`, the path's next candidate. The router finds a
-- path as for Ingresses (router.match); when that route has `when`, `select`
-- walks the host's candidates in the router's path order -- Exact, then
-- Prefix paths longest first with the Regex paths longer than each before it,
-- then Prefix "/" -- and in each path's chain in order, and answers with the
-- first candidate whose conditions hold (nil: 404). A route without `when`
-- always holds and ends its chain. The controller decided the order
-- (the Gateway API precedence); nothing here re-derives it.
--
-- Header values are nginx's `$http_<name>` (the first of repeated headers);
-- query values are the decoded first value of the parameter; names of query
-- parameters are case-sensitive, header names are not. Regular expressions
-- are PCRE (`ngx.re.find`, "jo": case-sensitive, found anywhere unless
-- anchored). Routes with `when` never take router.fast(): their policy is
-- not `fast` (decided in routes.py), so plain routes pay nothing for this.
local M = {}

local byte = string.byte
local sub = string.sub
local SLASH = 47

local value = require("util.nullable").value

local function compile_list(list, header)
  if list == nil then
    return nil
  end
  local out = {}
  for i, item in ipairs(list) do
    local name = item[1]
    if header then
      name = "http_" .. name:lower():gsub("-", "_")
    end
    out[i] = { name = name, value = item[2], regex = item[3] }
  end
  return out
end

--- `when` as posted -> its compiled form.
function M.compile(when)
  return {
    headers = compile_list(value(when.headers), true),
    query = compile_list(value(when.query), false),
    method = value(when.method),
  }
end

local function equal_or_found(got, match, find)
  if match.regex then
    return find(got, match.value, "jo") ~= nil
  end
  return got == match.value
end

--- Whether the compiled conditions `c` hold for `request`:
--   request.header(var name) -> value | nil, request.args() -> {name = value |
--   {values} | true}, request.method() -> "GET"; `find` as ngx.re.find.
function M.holds(c, request, find)
  if c.method ~= nil and request.method() ~= c.method then
    return false
  end
  local headers = c.headers
  if headers ~= nil then
    for i = 1, #headers do
      local match = headers[i]
      local got = request.header(match.name)
      if got == nil or not equal_or_found(got, match, find) then
        return false
      end
    end
  end
  local query = c.query
  if query ~= nil then
    local args = request.args()
    for i = 1, #query do
      local match = query[i]
      local got = args[match.name]
      if type(got) == "table" then
        got = got[1]
      end
      if got == true then
        got = "" -- "?name" without a value
      end
      if got == nil or not equal_or_found(got, match, find) then
        return false
      end
    end
  end
  return true
end

-- The first candidate of `location`'s chain whose conditions hold, or nil.
local function first(location, request, find)
  repeat
    local when = location.when
    if when == nil or M.holds(when, request, find) then
      return location
    end
    location = location.next
  until location == nil
  return nil
end

-- The regex paths from index `ri` longer than `above` that match `uri`, in
-- order: the first candidate that holds (and the index to go on from).
local function regexes(host, uri, request, find, ri, above)
  local regex = host.regex
  if regex == nil then
    return nil, ri
  end
  while ri <= #regex do
    local candidate = regex[ri]
    if candidate.length <= above then
      return nil, ri
    end
    ri = ri + 1
    if find(uri, candidate.pattern, "ijo") then
      local found = first(candidate, request, find)
      if found ~= nil then
        return found, ri
      end
    end
  end
  return nil, ri
end

--- The route of `host` (compiled by router.lua) answering `uri` for
-- `request` (see M.holds), or nil: the walk of the module comment.
function M.select(host, uri, request, find)
  local found = host.exact[uri]
  if found ~= nil then
    found = first(found, request, find)
    if found ~= nil then
      return found
    end
  end
  local ri = 1
  local prefix, longest, n = host.prefix, host.longest, #uri
  if longest > 0 then
    -- As router.lua's longest_prefix, but going on past a match: the whole
    -- URI, then each "/"-bounded prefix no longer than the longest path.
    local i = (n < longest + 1 and n or longest + 1) + 1
    local candidate = n <= longest and prefix[uri] or nil
    while i > 1 do
      if candidate ~= nil then
        found, ri = regexes(host, uri, request, find, ri, candidate.length)
        if found ~= nil then
          return found
        end
        found = first(candidate, request, find)
        if found ~= nil then
          return found
        end
      end
      i = i - 1
      candidate = nil
      if i > 1 and byte(uri, i) == SLASH then
        candidate = prefix[sub(uri, 1, i - 1)]
      end
    end
  end
  found = regexes(host, uri, request, find, ri, 0)
  if found ~= nil then
    return found
  end
  return host.root and first(host.root, request, find)
end

---------------------------------------------------------------------------
-- nginx glue
---------------------------------------------------------------------------

local ngx_var = ngx and ngx.var
local args_now = nil -- the current request's query arguments, read once per select

local REQUEST = {
  header = function(name)
    return ngx_var[name]
  end,
  args = function()
    if args_now == nil then
      args_now = ngx.req.get_uri_args(100)
    end
    return args_now
  end,
  method = function()
    return ngx.req.get_method()
  end,
}

--- router.route()'s hook: the route of `host` for this request's `uri`.
function M.route(host, uri)
  args_now = nil
  local found = M.select(host, uri, REQUEST, ngx.re.find)
  args_now = nil
  return found
end

-- Run per change (compilation), not per request: see util/cold.lua.
require("util.cold").functions(compile_list, M.compile)

return M
