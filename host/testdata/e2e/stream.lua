-- stream: each event n is recorded once, as stream/handled/<n> = TAG; a
-- second delivery of n marks stream/dup = n. The tests reload this rule with
-- another TAG in the middle of a stream.
local ss = require("ssrun")
local TAG = "v1"

ss.watch("stream/in")

function on_event(ev)
  local ok, msg, code = ss.set("stream/handled/" .. ev.value, TAG, {nx = true})
  if ok == false then
    ok, msg, code = ss.set("stream/dup", ev.value)
  end
  if ok == nil then error(code .. ": " .. msg) end
end
