--- Canary decision: should this request go to the alternative backend?
--
-- Pure function of the alternative backend's `traffic_shaping_policy`, the
-- request's header and cookie values, and two injected helpers, so it runs
-- under busted without nginx.
--
-- Precedence, as in ingress-nginx:
--   1. Header `policy.header`, if the request has it:
--      * `header_value` set:   equal to it -> canary; any other value is ignored.
--      * else `header_pattern` set: regex matches -> canary; otherwise ignored.
--      * else: "always" -> canary, "never" -> primary; other values ignored.
--   2. Cookie `policy.cookie`, if the request has it: "always" -> canary,
--      "never" -> primary; other values ignored.
--   3. Session affinity: a request that already belongs to a sticky session
--      of the primary stays there, one of the canary goes there. So the
--      weight below splits sessions, not requests, when the backends are
--      sticky, and a session does not flip between versions mid-way.
--      (ingress-nginx checks affinity before everything; we let explicit
--      header/cookie overrides win, so testers can always force a side.)
--   4. Weight: canary with probability weight / weight_total
--      (weight_total defaults to 100).
-- "Ignored" means the next rule decides: a header whose value does not match
-- falls through to the cookie and then the weight (the documented
-- ingress-nginx behaviour for canary-by-header-value/-pattern). Note that an
-- exact `header_value` match only ever routes *to* the canary; only the
-- always/never form can force the primary.
local M = {}

M.DEFAULT_WEIGHT_TOTAL = 100

local function present(s)
  return s ~= nil and s ~= ""
end

-- The words a canary header or cookie forces a decision with
-- (ingress-nginx's canary-by-header / canary-by-cookie).
local FORCED = { always = true, never = false }

--- Decide by header; returns true, false, or nil (no decision).
local function by_header(policy, value, match)
  if not present(policy.header) or value == nil then
    return nil
  end
  if present(policy.header_value) then
    if value == policy.header_value then
      return true
    end
    return nil
  end
  if present(policy.header_pattern) then
    if match(value, policy.header_pattern) then
      return true
    end
    return nil
  end
  return FORCED[value]
end

local function by_cookie(policy, value)
  if not present(policy.cookie) or value == nil then
    return nil
  end
  return FORCED[value]
end

local function by_weight(policy, random)
  local weight = policy.weight or 0
  if weight <= 0 then
    return false
  end
  local total = policy.weight_total
  if total == nil or total <= 0 then
    total = M.DEFAULT_WEIGHT_TOTAL
  end
  return random(total) <= weight
end

--- `inputs`: `{header = <value of policy.header or nil>, cookie = <value of policy.cookie or nil>,
---   affinity = "primary" | "alternative" | nil}` (whose sticky session the request carries).
--- `deps`: `{match = function(subject, regex) -> bool, random = function(n) -> 1..n}`.
function M.use_alternative(policy, inputs, deps)
  if policy == nil then
    return false
  end
  local decision = by_header(policy, inputs.header, deps.match)
  if decision ~= nil then
    return decision
  end
  decision = by_cookie(policy, inputs.cookie)
  if decision ~= nil then
    return decision
  end
  if inputs.affinity == "primary" then
    return false
  elseif inputs.affinity == "alternative" then
    return true
  end
  return by_weight(policy, deps.random)
end

return M
