//go:build !wasip1

package ssrun

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStubs: outside wasip1 every verb fails with UNAVAILABLE, naming the
// verb and key, so rule code compiles and vets on any platform; Now is the
// local clock.
func TestStubs(t *testing.T) {
	_, getErr := Get("k")
	_, setErr := Set("k", []byte("v"))
	_, lockErr := Lock("k", time.Second)
	keysList, keysErr := Keys("k/*")
	if keysList != nil {
		t.Errorf("Keys outside wasm returned %q", keysList)
	}
	for verb, err := range map[string]error{
		"get": getErr, "set": setErr, "del": Del("k"), "vdel": VDel("k", nil), "watch": Watch("k"),
		"unwatch": Unwatch("k"), "lock": lockErr, "unlock": Unlock("k"), "log": Log(LevelInfo, "m"),
		"timer": Timer("k", time.Second), "cancel": Cancel("k"),
		"keys": keysErr, "watch_pattern": WatchPattern("k/*"), "unwatch_pattern": UnwatchPattern("k/*"),
	} {
		var e *Error
		if !errors.As(err, &e) || e.Status != StatusUnavailable || !strings.HasPrefix(e.Msg, verb+" ") {
			t.Errorf("%s: %v; want an *Error with UNAVAILABLE naming the verb", verb, err)
		}
	}
	before := time.Now().UnixMilli()
	got := Now()
	if after := time.Now().UnixMilli(); got < before || got > after {
		t.Errorf("Now() = %d, want the local clock in [%d, %d]", got, before, after)
	}
}
