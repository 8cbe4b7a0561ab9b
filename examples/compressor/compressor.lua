-- Compressor with a minimum on and off time: follow compressor/demand, but
-- never switch sooner than compressor/min_ms (default 3 minutes) after the
-- last switch. A demand that changes back within that time is simply
-- followed later, or not at all if it returned to the current state.
--
--   compressor/demand   watched: "on" | "off", written by a thermostat
--   compressor/min_ms   read: the minimum on/off time in milliseconds
--   compressor/state    written: "on" | "off", what the relay should do
--   compressor/since    written: when the state last changed (Unix ms)
--
-- The hold timer lives in the state store: a restart during the hold
-- still switches when it ends (at once, late, if it ended while down).

local ss = require("ssrun")

local DEFAULT_MS = 3 * 60 * 1000

ss.watch("compressor/demand")

local function decide()
  local want = ss.get("compressor/demand")
  if want ~= "on" then want = "off" end
  local state = ss.get("compressor/state") or "off"
  if want == state then
    ss.cancel("hold")              -- nothing to wait for
    return
  end
  local min = math.floor(tonumber((ss.get("compressor/min_ms"))) or DEFAULT_MS)
  local since = tonumber((ss.get("compressor/since")))
  local now = ss.now()
  if since and now - since < min then
    -- too soon: decide again when the hold ends (re-arming keeps one timer)
    assert(ss.timer("hold", since + min - now))
    return
  end
  assert(ss.set("compressor/since", tostring(now)))
  assert(ss.set("compressor/state", want))
  ss.info("compressor " .. want)
end

function on_event(ev)
  if ev.op == "TIMER" and ev.key == "hold" then
    decide()
  elseif ev.key == "compressor/demand" then
    decide()
  end
end
