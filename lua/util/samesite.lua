--- Clients that mishandle `SameSite=None` (session-cookie-conditional-samesite-none).
--
-- Some browsers treat `SameSite=None` as `Strict` or reject the cookie:
-- iOS 12 (every browser there: they all use its WebKit), Safari and
-- embedded browsers of macOS 10.14, Chrome/Chromium 51 to 66, and UC
-- Browser before 12.13.2 (the list Chromium's SameSite notes give, which
-- ingress-nginx follows). For them the attribute is left out.
local M = {}

local function uc_browser_before_12_13_2(ua)
  local major, minor, build = ua:match("UCBrowser/(%d+)%.(%d+)%.(%d+)")
  if major == nil then
    return false
  end
  major, minor, build = tonumber(major), tonumber(minor), tonumber(build)
  if major ~= 12 then
    return major < 12
  end
  if minor ~= 13 then
    return minor < 13
  end
  return build < 2
end

--- Whether a client with this User-Agent handles `SameSite=None` (true when unknown).
function M.none_compatible(ua)
  if ua == nil or ua == "" then
    return true
  end
  if ua:find("%(iP[%a]+; CPU[%a ]* OS 12[_%d]*[^)]*%) AppleWebKit/") then
    return false
  end
  if ua:find("%(Macintosh;[^)]*Mac OS X 10_14[_%d]*[^)]*%) AppleWebKit/") then
    local safari = ua:find("Version/[%d%.]+ Safari/") and not ua:find("Chrom")
    local embedded = ua:match("AppleWebKit/[%d%.]+ %(KHTML, like Gecko%)$") ~= nil
    if safari or embedded then
      return false
    end
  end
  local chrome = tonumber(ua:match("Chrom[%a]*/(%d+)%."))
  if chrome ~= nil and chrome >= 51 and chrome <= 66 then
    return false
  end
  return not uc_browser_before_12_13_2(ua)
end

return M
