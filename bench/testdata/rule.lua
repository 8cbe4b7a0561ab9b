-- The Lua rule of the benchmarks in package bench. It watches lua/in and
-- lua/trigger. Events:
--
--   lua/in        GET lua/in, then SET lua/out to its value (the end-to-end
--                 throughput rule)
--   lua/trigger   SET lua/tagged to "<TAG>:<value>" (hot reload: the tag says
--                 which version handled the event; the benchmark rewrites it)
--   noop          nothing (the event round trip)
--   verb          value "<verb> <n>": call one ABI verb n times, with the same
--                 calls and outcomes as bench/testdata/wasmrule/verbs.go

local ss = require("ssrun")

local TAG = "A"

ss.watch("lua/in")
ss.watch("lua/trigger")

-- check turns a failed call (nil, message, code) into an error.
local function check(ok, msg, code)
  if ok == nil then error(tostring(code) .. ": " .. tostring(msg), 2) end
  return ok
end

local VALUE = "0123456789abcdef"

-- Each loop checks the last result only, so the loop body is the call.
-- floor is a bare Lua -> Go call: rawequal, a builtin of gopher-lua's base
-- library.
local loops = {
  floor = function(n) local r for _ = 1, n do r = rawequal(VALUE, VALUE) end return r end,
  get = function(n) local a, b, c for _ = 1, n do a, b, c = ss.get("bench/k") end return check(a, b, c) end,
  set = function(n) local a, b, c for _ = 1, n do a, b, c = ss.set("bench/k", VALUE) end return check(a, b, c) end,
  del = function(n) local a, b, c for _ = 1, n do a, b, c = ss.del("absent") end return check(a, b, c) end,
  vdel = function(n) local a, b, c for _ = 1, n do a, b, c = ss.vdel("bench/k", "other") end return check(a, b, c) end,
  watch = function(n) local a, b, c for _ = 1, n do a, b, c = ss.watch("bench/w") end return check(a, b, c) end,
  unwatch = function(n) local a, b, c for _ = 1, n do a, b, c = ss.unwatch("bench/u") end return check(a, b, c) end,
  lock = function(n) local a, b, c for _ = 1, n do a, b, c = ss.lock("bench/l", 60000) end return check(a, b, c) end,
  unlock = function(n) local a, b, c for _ = 1, n do a, b, c = ss.unlock("bench/u") end return check(a, b, c) end,
  log = function(n) local a, b, c for _ = 1, n do a, b, c = ss.log("debug", "bench") end return check(a, b, c) end,
  timer = function(n) local a, b, c for _ = 1, n do a, b, c = ss.timer("bench/t", 60000) end return check(a, b, c) end,
  cancel = function(n) local a, b, c for _ = 1, n do a, b, c = ss.cancel("bench/c") end return check(a ~= nil or nil, b, c) end,
  now = function(n) local r for _ = 1, n do r = ss.now() end return r end,
  -- revision 3: keys lists bench/k; unwatch_pattern meets NOT_FOUND (false)
  keys = function(n) local a, b, c for _ = 1, n do a, b, c = ss.keys("bench/*") end return check(a, b, c) end,
  watch_pattern = function(n) local a, b, c for _ = 1, n do a, b, c = ss.watch_pattern("bench/p*") end return check(a, b, c) end,
  unwatch_pattern = function(n) local a, b, c for _ = 1, n do a, b, c = ss.unwatch_pattern("bench/none*") end return check(a ~= nil or nil, b, c) end,
}

function on_event(ev)
  if ev.key == "lua/in" then
    check(ss.set("lua/out", check(ss.get("lua/in"))))
  elseif ev.key == "lua/trigger" then
    check(ss.set("lua/tagged", TAG .. ":" .. ev.value))
  elseif ev.key == "noop" then
    return
  elseif ev.key == "verb" then
    local verb, n = string.match(ev.value, "^(%S+) (%d+)$")
    local f = loops[verb]
    if f == nil then error("unknown verb " .. tostring(verb)) end
    f(tonumber(n))
  else
    error("unknown event key " .. ev.key)
  end
end
