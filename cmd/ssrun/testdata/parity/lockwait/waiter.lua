-- Waits for a lock another holder has, takes it when it is freed, then
-- loses it: LOCK_LOST, and its fenced writes fail with LOCK_LOST.
local ss = require("ssrun")
ss.watch("go")

function on_event(ev)
  if ev.op == "LOCK_LOST" then
    ss.warn("lost " .. ev.key)
    return
  end
  if ev.value == "write" then
    local ok, msg, code = ss.set("guarded", "w", {fence = "L"})
    ss.info("fenced write: " .. (ok and "OK" or tostring(code)))
    return
  end
  ss.info("waiting for L")
  local token, msg, code = ss.lock("L", 3000, {wait = 800})
  if not token then ss.warn("no lock: " .. tostring(code)) return end
  ss.info("got L")
  assert(ss.set("guarded", "mine", {fence = "L"}))
end
