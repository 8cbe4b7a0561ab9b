package lua_test

import (
	"context"
	"fmt"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	lua "github.com/ssrun/ssrun/runtime/lua"
)

func ExampleRuntime() {
	rt := lua.New(lua.Config{})
	prog, err := rt.Compile(context.Background(), "rules/echo.lua", []byte(`
local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  if ev.op == "SET" then
    local ok = ss.set("out", ev.value)
    print("copied", ev.value, ok)
  end
end`))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := abitest.New()
	s, err := prog.Start(context.Background(), h, abi.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(context.Background())
	if err := s.Handle(context.Background(), abi.Event{Key: "in", Op: abi.OpSet, Value: []byte("42")}); err != nil {
		fmt.Println(err)
	}
	out, _ := h.Value("out")
	fmt.Printf("watches %v, out=%s, log %q\n", h.Watches(), out, h.Logs()[0].Msg)
	// Output: watches map[in:{false}], out=42, log "copied\t42\ttrue"
}
