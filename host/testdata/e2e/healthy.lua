-- healthy: copies healthy/in to healthy/out.
local ss = require("ssrun")

ss.watch("healthy/in")

function on_event(ev)
  assert(ss.set("healthy/out", ev.value))
end
