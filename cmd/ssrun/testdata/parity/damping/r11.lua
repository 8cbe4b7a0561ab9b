local ss = require("ssrun")
ss.watch("chain/11")
function on_event(ev)
  assert(ss.set("chain/12", ev.value .. "+11"))
end
