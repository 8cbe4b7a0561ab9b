local ss = require("ssrun")
ss.watch("chain/04")
function on_event(ev)
  assert(ss.set("chain/05", ev.value .. "+04"))
end
