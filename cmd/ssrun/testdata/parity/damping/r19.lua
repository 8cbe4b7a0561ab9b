local ss = require("ssrun")
ss.watch("chain/19")
function on_event(ev)
  assert(ss.set("chain/20", ev.value .. "+19"))
end
