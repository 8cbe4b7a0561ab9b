-- Writes under the host's reserved prefix: the host denies it, whatever
-- the rule's permissions ($ssrun/ holds the rules' timers).
local ss = require("ssrun")
ss.watch("go")

function on_event(ev)
  local ok, msg, code = ss.set("$ssrun/timer/x/y", ev.value)
  if ok then ss.info("wrote reserved") else ss.warn("reserved write refused: " .. tostring(code)) end
  local v, m2, c2 = ss.get("$ssrun/timers/x")
  if v == nil then ss.warn("reserved read refused: " .. tostring(c2)) end
  assert(ss.set("done", ev.value))
end
