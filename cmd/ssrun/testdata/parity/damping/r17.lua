local ss = require("ssrun")
ss.watch("chain/17")
function on_event(ev)
  assert(ss.set("chain/18", ev.value .. "+17"))
end
