-- lock: on each tick of lock/tick/<ME>, take the lock "leader" (no wait) and
-- write "shared" = ME fenced with it; record the outcome as
-- lock/result/<ME> = "<status>:<tick value>". The tests run one copy per
-- host, each with its own ME.
local ss = require("ssrun")
local ME = "a"

ss.watch("lock/tick/" .. ME)

function on_event(ev)
  local status = "OK"
  local token, msg, code = ss.lock("leader", 60000)
  if token == false then
    status = "BUSY"
  elseif token == nil then
    status = code
  else
    local ok
    ok, msg, code = ss.set("shared", ME, {fence = "leader"})
    if ok == nil then status = code end
  end
  assert(ss.set("lock/result/" .. ME, status .. ":" .. ev.value))
end
