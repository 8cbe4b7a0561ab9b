-- Thermostat rule: keep the set point of thermostat1 inside a safe range and
-- drive the HVAC target from it.
--
--   thermostat1/setPoint  watched: the requested temperature (°C, a number)
--   hvac1/target          written: the clamped set point ("28", "21.5")
--   thermostat1/error     written when the set point is not a number
--
-- A set point outside [MIN, MAX] is clamped and the clamped value is written
-- back, so every reader sees the value actually in force. This rule is not
-- woken by that write of its own (ssrun suppresses a rule's own echoes).

local ss = require("ssrun")

local SET_POINT = "thermostat1/setPoint"
local TARGET    = "hvac1/target"
local ERROR     = "thermostat1/error"
local MIN, MAX  = 16, 28

ss.watch(SET_POINT)

-- check turns a failed call (nil, message, code) into an error, so the host
-- reports it with this rule's name and line.
local function check(ok, msg, code)
  if ok == nil then error(code .. ": " .. msg, 2) end
  return ok
end

function on_event(ev)
  if ev.op == "DELETE" then
    check(ss.del(TARGET)) -- 0 when already absent: fine
    return
  end

  local requested = tonumber(ev.value)
  if requested == nil then
    ss.warn("invalid set point " .. string.format("%q", ev.value))
    check(ss.set(ERROR, string.format("invalid set point %q", ev.value)))
    return
  end

  local clamped = math.min(MAX, math.max(MIN, requested))
  check(ss.set(TARGET, tostring(clamped)))
  if clamped ~= requested then
    ss.info(string.format("set point %s clamped to %s", tostring(requested), tostring(clamped)))
    check(ss.set(SET_POINT, tostring(clamped)))
  end
  check(ss.del(ERROR))
end
