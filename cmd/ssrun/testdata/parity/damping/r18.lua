local ss = require("ssrun")
ss.watch("chain/18")
function on_event(ev)
  assert(ss.set("chain/19", ev.value .. "+18"))
end
