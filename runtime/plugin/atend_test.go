package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// TestSetAtEnd: sdk.SetAtEnd's writes are not made while the handler runs
// on a session (a get of the key finds nothing) but are all applied, in
// order and with the values as they were when called, by the time Handle
// returns; without a session they are plain sets.
func TestSetAtEnd(t *testing.T) {
	forAllTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		want := `atend status=OK msg="" found=false`
		if unaryOnly {
			want = `atend status=OK msg="" found=true`
		}
		if got := run(t, s, h, command("atend", "a", "1", "-", "b", "2", "-", "a", "3", "-")); got != want {
			t.Errorf("report %s, want %s", got, want)
		}
		for k, want := range map[string]string{"a": "3", "b": "2"} {
			if v, ok := h.Value(k); !ok || string(v) != want {
				t.Errorf("%s = %q (found %t), want %q", k, v, ok, want)
			}
		}
		seqs(t, s, h, 1, 1)
	})
}

// TestSetAtEndFails: the first write at the end that fails fails the event
// with its status (as the same set made at once would, returned by the
// handler), and the writes after it are not applied; the process stays.
func TestSetAtEndFails(t *testing.T) {
	forAllTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		if _, err := h.Set(context.Background(), "b", []byte("old"), abi.SetOptions{}); err != nil {
			t.Fatal(err)
		}
		err := s.Handle(context.Background(), command("atend", "a", "1", "-", "b", "2", "nx", "c", "3", "-"))
		e := wantError(t, err, callHandle, abi.ErrCrashed)
		if e.Status != abi.StatusNotApplied || (!unaryOnly && !strings.Contains(e.Msg, "write 2 of 3 at the end of the event")) {
			t.Errorf("error %v: status %v, want NOT_APPLIED (naming write 2 of 3 on a session)", err, e.Status)
		}
		for k, want := range map[string]string{"a": "1", "b": "old"} {
			if v, _ := h.Value(k); string(v) != want {
				t.Errorf("%s = %q, want %q", k, v, want)
			}
		}
		if _, ok := h.Value("c"); ok {
			t.Error("c, written after the failed write, is set")
		}
		if st := s.stats(); st.Starts != 1 || st.Exits != 0 {
			t.Errorf("stats %+v, want the first process still", st)
		}
		seqs(t, s, h, 1, 1)
	})
}

// TestSetAtEndCrash: a plugin that dies before its handler returns loses
// the handler's writes at the end with the event (counted as lost), and
// the restarted process handles the next events.
func TestSetAtEndCrash(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		err := s.Handle(context.Background(), command("atendexit", "k"))
		wantError(t, err, callHandle, abi.ErrCrashed)
		if v, ok := h.Value("k"); ok {
			t.Errorf("k = %q: the write at the end of an event whose plugin died was applied", v)
		}
		testutil.WaitFor(t, "the plugin to be restarted", func() bool { return s.stats().Starts == 2 })
		seqs(t, s, h, 1, 2)
		if st := s.stats(); st.Lost != 1 {
			t.Errorf("stats %+v, want one event lost", st)
		}
	})
}
