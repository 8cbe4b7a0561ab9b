local ss = require("ssrun")
ss.watch("arm")

function on_event(ev)
  if ev.op == "TIMER" then
    ss.info("v1 fired " .. ev.key .. " " .. ev.value)
    return
  end
  assert(ss.timer("t", 1500, {payload = ev.value}))
end
