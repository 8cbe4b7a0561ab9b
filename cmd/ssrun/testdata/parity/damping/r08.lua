local ss = require("ssrun")
ss.watch("chain/08")
function on_event(ev)
  assert(ss.set("chain/09", ev.value .. "+08"))
end
