-- Re-creates its key with a short TTL each time it expires: a loop through
-- expiry, which the host damps like any other (the DELETE of an expired key
-- continues the chain of the write that set its TTL).
local ss = require("ssrun")
ss.watch("blink")
assert(ss.set("blink", "0", {ttl = 100}))

function on_event(ev)
  if ev.op ~= "DELETE" then return end
  local n = (tonumber((ss.get("blinks"))) or 0) + 1
  assert(ss.set("blinks", tostring(n)))
  assert(ss.set("blink", tostring(n), {ttl = 100}))
end
