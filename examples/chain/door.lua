-- Front door: when the door opens, raise the alarm if the house is armed,
-- else switch the hall light on.
--
--   door/front    watched: "open" | "closed", written by the door sensor
--   alarm/armed   read: "yes" while the house is armed
--   alarm/state   written: "intrusion" when the door opens while armed
--                 (alarm.lua takes it from there)
--   lights/hall   written: "on" when the door opens while disarmed

local ss = require("ssrun")

ss.watch("door/front")

function on_event(ev)
  if ev.op ~= "SET" or ev.value ~= "open" then return end
  local armed, msg, code = ss.get("alarm/armed") -- nil when absent
  if code then error(code .. ": " .. msg) end
  if armed == "yes" then
    ss.warn("front door opened while armed")
    assert(ss.set("alarm/state", "intrusion"))
  else
    assert(ss.set("lights/hall", "on"))
  end
end
