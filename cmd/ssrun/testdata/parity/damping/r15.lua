local ss = require("ssrun")
ss.watch("chain/15")
function on_event(ev)
  assert(ss.set("chain/16", ev.value .. "+15"))
end
