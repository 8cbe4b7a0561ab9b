local ss = require("ssrun")
ss.watch("chain/13")
function on_event(ev)
  assert(ss.set("chain/14", ev.value .. "+13"))
end
