local ss = require("ssrun")
ss.watch("in")

local function try(what, ok, msg, code)
  if ok then ss.info(what .. " OK") else ss.warn(what .. " refused: " .. tostring(code)) end
end

function on_event(ev)
  try("read secret", ss.get("secret/a"))
  try("write secret", ss.set("secret/a", ev.value))
  try("lock public", ss.lock("public/lock", 1000))
  try("watch secret", ss.watch("secret/b"))
  try("delete secret", ss.del("secret/a"))
  assert(ss.set("public/out", ev.value))
end
