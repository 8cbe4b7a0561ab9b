local ss = require("ssrun")
ss.watch("chain/06")
function on_event(ev)
  assert(ss.set("chain/07", ev.value .. "+06"))
end
