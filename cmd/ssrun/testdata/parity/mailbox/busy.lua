-- Blocks in a lock wait on "block" while more events arrive: its mailbox
-- of 2 keeps two; past that a change of a waiting key replaces it
-- (conflated), and one of another key is dropped (mailbox_keys: 2). It
-- writes how many changes each event replaced.
local ss = require("ssrun")
ss.watch("in")
ss.watch("other")

function on_event(ev)
  if ev.value == "block" then
    ss.info("waiting for L")
    local token = ss.lock("L", 3000, {wait = 800})
    ss.info("lock: " .. tostring(token ~= false and token ~= nil))
    return
  end
  assert(ss.set("seen/" .. ev.value, tostring(ev.coalesced)))
end
