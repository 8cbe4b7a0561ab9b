-- Alarm: the garden siren sounds while the alarm state is "intrusion"
-- (set by door.lua); any other state, e.g. "clear" set by the user, or
-- deleting the state, silences it.
--
--   alarm/state    watched
--   siren/garden   written: "on" | "off"

local ss = require("ssrun")

ss.watch("alarm/state")

function on_event(ev)
  local siren = "off"
  if ev.op == "SET" and ev.value == "intrusion" then siren = "on" end
  assert(ss.set("siren/garden", siren))
end
