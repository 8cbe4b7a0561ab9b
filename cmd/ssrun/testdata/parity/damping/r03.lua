local ss = require("ssrun")
ss.watch("chain/03")
function on_event(ev)
  assert(ss.set("chain/04", ev.value .. "+03"))
end
