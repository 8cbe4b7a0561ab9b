-- Blocks in a lock wait on "block" while more events arrive: its mailbox
-- of 2 keeps two, the rest are dropped.
local ss = require("ssrun")
ss.watch("in")

function on_event(ev)
  if ev.value == "block" then
    ss.info("waiting for L")
    local token = ss.lock("L", 3000, {wait = 800})
    ss.info("lock: " .. tostring(token ~= false and token ~= nil))
    return
  end
  assert(ss.set("seen/" .. ev.value, "1"))
end
