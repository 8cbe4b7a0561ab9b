-- holder: one side of the paused-holder test (lock_pause_test.go), run by
-- two `ssrun run` processes, each with its own ME. On each command written
-- to pause/cmd/<ME>:
--   "lock"        takes the lease pause/leader (ttl TTL ms, no wait);
--   "write <n>"   writes pause/shared = "<ME> <n>" fenced with that lease.
-- The outcome goes to pause/result/<ME> as "<command>: <status>"; a LOCK_LOST
-- event is recorded as pause/lost/<ME> = the lock's name.
local ss = require("ssrun")
local ME = "a"
local TTL = 1000
local LOCK = "pause/leader"

ss.watch("pause/cmd/" .. ME)

function on_event(ev)
  if ev.op == "LOCK_LOST" then
    ss.warn("LOCK_LOST " .. ev.key)
    assert(ss.set("pause/lost/" .. ME, ev.key))
    return
  end
  local status
  if ev.value == "lock" then
    local token, msg, code = ss.lock(LOCK, TTL)
    if token then status = "OK" elseif token == false then status = "BUSY" else status = code end
  else
    local ok, msg, code = ss.set("pause/shared", ME .. " " .. string.sub(ev.value, 7), {fence = LOCK})
    if ok then status = "OK" else status = code .. " (" .. tostring(msg) .. ")" end
  end
  assert(ss.set("pause/result/" .. ME, ev.value .. ": " .. status))
end
