package lua

import (
	"context"
	"runtime"
	"testing"

	glua "github.com/yuin/gopher-lua"
)

// TestStateBytesEstimate compares stateBytes with what the Go heap holds
// after building typical shapes of data in a state: the estimate must stay
// within a factor of two of the truth, so a limit means about what it says.
// (The worst shapes are small tables with string keys: gopher-lua gives
// their map room for 32 keys or for as many as the constructor has, which
// is not visible from outside.)
func TestStateBytesEstimate(t *testing.T) {
	for _, tc := range []struct{ name, build string }{
		{"array of numbers", `x = {} for i = 1, 200000 do x[i] = i + 0.5 end`},
		{"array of small tables", `x = {} for i = 1, 50000 do x[i] = {i, i} end`},
		{"string keys", `x = {} for i = 1, 50000 do x["key" .. i] = true end`},
		{"records built by constructors", `x = {} for i = 1, 20000 do x[i] = {name = "n" .. i, value = i, ok = true} end`},
		{"records built by assignments", `x = {} for i = 1, 20000 do local r = {} r.name = "n" .. i r.value = i r.ok = true x[i] = r end`},
		{"number keys", `x = {} for i = 1, 50000 do x[i * 1.5] = i end`},
		{"distinct long strings", `x = {} for i = 1, 20000 do x[i] = string.rep("y", 100) .. i end`},
		{"one long string many times", `local s = string.rep("z", 1e6) x = {} for i = 1, 50000 do x[i] = s end`},
		{"closures", `x = {} for i = 1, 20000 do x[i] = function() return i end end`},
		{"one big string", `x = string.rep("w", 8e6)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			L := glua.NewState(glua.Options{SkipOpenLibs: true})
			defer L.Close()
			for _, open := range []glua.LGFunction{glua.OpenBase, glua.OpenString} {
				L.Push(L.NewFunction(open))
				L.Call(0, 0)
			}
			fn, err := L.LoadString(tc.build)
			if err != nil {
				t.Fatal(err)
			}
			estBefore, _, _ := stateBytes(context.Background(), L, 1<<40)
			heapBefore := heapAlloc()
			L.Push(fn)
			L.Call(0, 0)
			heapAfter := heapAlloc()
			estAfter, _, _ := stateBytes(context.Background(), L, 1<<40)
			real, est := float64(heapAfter)-float64(heapBefore), float64(estAfter-estBefore)
			ratio := est / real
			t.Logf("estimate %.0f KiB, heap %.0f KiB: x%.2f", est/1024, real/1024, ratio)
			if ratio < 0.5 || ratio > 2 {
				t.Errorf("estimate %.0f KiB is x%.2f the heap's %.0f KiB", est/1024, ratio, real/1024)
			}
			runtime.KeepAlive(fn)
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
