-- react: a change of react/in is answered with react/out = "got <value>".
local ss = require("ssrun")

ss.watch("react/in")

function on_event(ev)
  if ev.op ~= "SET" or ev.key ~= "react/in" or ev.version == "" then
    error("unexpected event " .. tostring(ev.op) .. " " .. tostring(ev.key))
  end
  assert(ss.set("react/out", "got " .. ev.value))
end
