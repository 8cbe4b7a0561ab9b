local ss = require("ssrun")
ss.watch("chain/02")
function on_event(ev)
  assert(ss.set("chain/03", ev.value .. "+02"))
end
