local ss = require("ssrun")
ss.watch("chain/16")
function on_event(ev)
  assert(ss.set("chain/17", ev.value .. "+16"))
end
