-- fail: fails the way fail/<ME>/in says (loop, error, bomb); any other
-- value is copied to fail/<ME>/out. The tests run two copies with their own
-- ME and limits.
local ss = require("ssrun")
local ME = "a"

ss.watch("fail/" .. ME .. "/in")

function on_event(ev)
  if ev.value == "loop" then
    while true do end
  elseif ev.value == "error" then
    error("the rule says no")
  elseif ev.value == "bomb" then
    local s = "x"
    while true do s = s .. s end
  end
  assert(ss.set("fail/" .. ME .. "/out", ev.value))
end
