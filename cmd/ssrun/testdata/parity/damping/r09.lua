local ss = require("ssrun")
ss.watch("chain/09")
function on_event(ev)
  assert(ss.set("chain/10", ev.value .. "+09"))
end
