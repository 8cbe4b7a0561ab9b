-- Door open too long: raise door/alarm when the front door stays open
-- longer than door/open_alarm_ms (default 5 minutes); clear it when the
-- door closes.
--
--   door/front          watched: "open" | "closed", written by the door sensor
--   door/open_alarm_ms  read: how long is too long, in milliseconds
--   door/open_since     written: when the door opened (Unix ms, ss.now())
--   door/alarm          written when the timer fires: {"since": ms, "late": bool}
--                       (late: the host was down or busy at the deadline);
--                       deleted when the door closes
--
-- The timer lives in the state store, so it fires even if ssrun restarts
-- (or is killed) while the door is open. A sensor that repeats "open" does
-- not postpone the alarm: the deadline is computed from door/open_since,
-- so re-arming the timer arms the same deadline.

local ss = require("ssrun")

local DEFAULT_MS = 5 * 60 * 1000

ss.watch("door/front")

local function too_long_ms()
  local v = ss.get("door/open_alarm_ms")
  return math.floor(tonumber(v) or DEFAULT_MS)
end

local function opened()
  local since = tonumber((ss.get("door/open_since")))
  if not since then
    since = ss.now()
    assert(ss.set("door/open_since", tostring(since)))
  end
  local left = math.max(0, since + too_long_ms() - ss.now())
  assert(ss.timer("door-open", left, {payload = tostring(since)}))
end

local function closed()
  ss.cancel("door-open")      -- false when none was armed: fine
  ss.del("door/open_since")
  ss.del("door/alarm")
end

function on_event(ev)
  if ev.op == "TIMER" and ev.key == "door-open" then
    if ev.late then ss.warn("door open too long; the alarm is late (ssrun was down or busy)") end
    assert(ss.set("door/alarm", ss.json.encode({since = tonumber(ev.value), late = ev.late})))
  elseif ev.key == "door/front" then
    if ev.op == "SET" and ev.value == "open" then opened() else closed() end
  end
end
