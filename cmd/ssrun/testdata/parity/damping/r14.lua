local ss = require("ssrun")
ss.watch("chain/14")
function on_event(ev)
  assert(ss.set("chain/15", ev.value .. "+14"))
end
