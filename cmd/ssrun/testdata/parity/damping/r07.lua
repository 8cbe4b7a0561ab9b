local ss = require("ssrun")
ss.watch("chain/07")
function on_event(ev)
  assert(ss.set("chain/08", ev.value .. "+07"))
end
