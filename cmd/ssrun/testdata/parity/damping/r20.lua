local ss = require("ssrun")
ss.watch("chain/20")
function on_event(ev)
  assert(ss.set("chain/21", ev.value .. "+20"))
end
