local ss = require("ssrun")
ss.watch("chain/10")
function on_event(ev)
  assert(ss.set("chain/11", ev.value .. "+10"))
end
