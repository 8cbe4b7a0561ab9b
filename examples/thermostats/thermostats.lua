-- Thermostats rule: a whole fleet of thermostats, however many there are
-- and however many are added while it runs. It keeps each set point inside
-- a safe range and drives that thermostat's HVAC target from it.
--
--   thermostats/<id>/setPoint  watched by pattern: the requested temperature (°C)
--   hvac/<id>/target           written: the clamped set point ("28", "21.5")
--   thermostats/<id>/error     written when the set point is not a number
--
-- ss.watch_pattern gives the rule every key that matches: those that exist
-- when it loads (one SET event each, marked resync), their changes, the
-- keys created later (found by the host's rescan, every 10 s by default,
-- or at once when a rule of the same host creates them) and a DELETE when
-- one goes away. A clamped set point is written back; the rule is not woken
-- by that write of its own.

local ss = require("ssrun")

local MIN, MAX = 16, 28

assert(ss.watch_pattern("thermostats/*/setPoint"))

local function check(ok, msg, code)
  if ok == nil then error(code .. ": " .. msg, 2) end
  return ok
end

function on_event(ev)
  local id = ev.key:match("^thermostats/(.+)/setPoint$")
  if id == nil then return end
  local target = "hvac/" .. id .. "/target"
  local err = "thermostats/" .. id .. "/error"

  if ev.op == "DELETE" then
    check(ss.del(target)) -- 0 when already absent: fine
    return
  end

  local requested = tonumber(ev.value)
  if requested == nil then
    check(ss.set(err, string.format("invalid set point %q", ev.value)))
    return
  end

  local clamped = math.min(MAX, math.max(MIN, requested))
  check(ss.set(target, tostring(clamped)))
  if clamped ~= requested then
    check(ss.set(ev.key, tostring(clamped)))
  end
  check(ss.del(err))
end
