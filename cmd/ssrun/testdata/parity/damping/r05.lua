local ss = require("ssrun")
ss.watch("chain/05")
function on_event(ev)
  assert(ss.set("chain/06", ev.value .. "+05"))
end
