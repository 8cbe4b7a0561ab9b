local ss = require("ssrun")
ss.watch("chain/12")
function on_event(ev)
  assert(ss.set("chain/13", ev.value .. "+12"))
end
