local ss = require("ssrun")
ss.watch("chain/01")
function on_event(ev)
  assert(ss.set("chain/02", ev.value .. "+01"))
end
