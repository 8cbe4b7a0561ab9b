-- Active/standby pump controller. Run this same rule on two hosts at once
-- (two `ssrun run` processes against one store): both see every tank level
-- reading, but only the instance holding the lease "pump/leader" drives the
-- pump. If that host dies, its lease expires and the standby takes over on
-- the next reading.
--
--   tank/level     watched: the tank level in percent, written by a sensor
--   pump/leader    the lease (value "<client id>:pump.lua", kept alive by ssrun)
--   pump/command   written by the active instance only, fenced: "on" | "off"
--   pump/owner     written with it, fenced: "<holder> <fencing token>"
--
-- Fencing: every write of the active instance carries the lease's token.
-- The store refuses a write whose token is older than one it has already
-- accepted for that key, so a host that lost the lease without noticing (a
-- long pause, a partition) cannot overwrite what the new active wrote.

local ss = require("ssrun")

local LOCK    = "pump/leader"
local LEVEL   = "tank/level"
local COMMAND = "pump/command"
local OWNER   = "pump/owner"
local TTL     = 2000 -- ms: the standby can take over this long after the active dies
local WAIT    = 500  -- ms: how long a standby waits for the lease per reading
                     -- (keep it under the rule's call timeout, 1 s by default)
local LOW     = 50   -- percent: below it the pump runs

ss.watch(LEVEL)

local active = false -- this instance holds the lease and drives the pump
local me              -- its holder name, read from the lease when it became active

-- standby forgets being active, saying why.
local function standby(why)
  if active then ss.warn("standing by: " .. why) end
  active = false
end

-- write is a fenced write; it reports whether it was applied.
local function write(key, value)
  local ok, msg, code = ss.set(key, value, {fence = LOCK})
  if ok then return true end
  if code == "FENCED" or code == "LOCK_LOST" then
    standby(msg) -- someone else holds the lease now; never write around it
    return false
  end
  error(tostring(code) .. ": " .. tostring(msg))
end

function on_event(ev)
  if ev.op == "LOCK_LOST" then
    standby("lost " .. ev.key)
    return
  end
  if ev.op ~= "SET" then return end
  local level = tonumber(ev.value)
  if level == nil then
    ss.warn("ignoring tank level " .. string.format("%q", ev.value))
    return
  end

  local token, msg, code = ss.lock(LOCK, TTL, {wait = WAIT})
  if token == false then
    standby("another instance holds " .. LOCK)
    ss.debug("standby: tank level " .. ev.value)
    return
  end
  if token == nil then error(code .. ": " .. msg) end
  if not active then
    active = true
    me = ss.get(LOCK) -- our holder name, "<client id>:pump.lua"
    ss.info("active now, fencing token " .. token)
  end

  local command = level < LOW and "on" or "off"
  if write(COMMAND, command) then
    write(OWNER, tostring(me) .. " " .. token)
  end
end
