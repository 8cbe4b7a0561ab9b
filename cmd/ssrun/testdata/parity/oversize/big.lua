local ss = require("ssrun")
ss.watch("in")

function on_event(ev)
  local ok, msg, code = ss.set("out", string.rep("x", 17))
  ss.info("17 bytes: " .. (ok and "OK" or tostring(code)))
  ok, msg, code = ss.timer("t", 1000, {payload = string.rep("p", 17)})
  ss.info("17-byte payload: " .. (ok and "OK" or tostring(code)))
  assert(ss.set("out", string.rep("y", 16)))
end
