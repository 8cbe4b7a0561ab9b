-- perm: tries a write and a read its permissions forbid, and records what
-- came back ("<code> <message>") where it may write.
local ss = require("ssrun")

ss.watch("perm/in")

-- outcome renders a refused call: its code and message, or what else came back.
local function outcome(first, msg, code)
  if first ~= nil then return "unexpected " .. tostring(first) end
  if code == nil then return "absent" end
  return code .. " " .. msg
end

function on_event(ev)
  assert(ss.set("perm/out/set", outcome(ss.set("secret/x", "leak"))))
  assert(ss.set("perm/out/get", outcome(ss.get("secret/y"))))
end
