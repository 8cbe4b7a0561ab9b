package host

import (
	"context"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/provenance"
)

// Why answers with the last write a rule made to a key: a SET with its
// value and version, a DEL; a write the store did not apply changes
// nothing. Each write is a debug log line.
func TestWhyRecordsRuleWrites(t *testing.T) {
	e := newEnv(t)
	boot := func(ctx context.Context, h abi.Host) error {
		if _, err := h.Set(ctx, "boot", []byte("1"), abi.SetOptions{}); err != nil { // while loading: no event
			return err
		}
		return h.Watch(ctx, "k", abi.WatchOptions{})
	}
	p := e.load("copy", goRule{init: boot, handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		switch string(ev.Value) {
		case "drop":
			return h.Del(ctx, "out", abi.DelOptions{})
		case "nx":
			_, err := h.Set(ctx, "out", ev.Value, abi.SetOptions{Cond: abi.CondNX}) // out exists: not applied
			if abi.StatusOf(err) == abi.StatusNotApplied {
				err = nil
			}
			return err
		}
		_, err := h.Set(ctx, "out", ev.Value, abi.SetOptions{})
		return err
	}})
	handled := func(n uint64) {
		t.Helper()
		waitFor(t, "handled", func() bool { return e.status("copy").Handled == n })
		if s := e.status("copy"); s.Failed != 0 {
			t.Fatalf("the rule failed: %s", s.LastError)
		}
	}
	if _, ok := e.host.Why("out"); ok {
		t.Fatal("a write journaled before any")
	}
	if w, ok := e.host.Why("boot"); !ok || w.Rule != "copy.gorule" || w.Event != (provenance.Cause{}) || w.Origin != nil || len(w.Chain) != 1 {
		t.Fatalf("a write at load: %+v (found %t), want no event, no origin", w, ok)
	}
	user := e.user.ClientID()
	v := e.set("k", "a")
	handled(1)
	w, ok := e.host.Why("out")
	out, _ := e.get("out")
	if !ok || w.Rule != "copy.gorule" || w.Op != "SET" || w.Value != out || w.Version == "" || w.At.IsZero() {
		t.Fatalf("after a SET: %+v (found %t), out = %q", w, ok, out)
	}
	if want := (provenance.Cause{Key: "k", Op: "SET", Version: v, Client: user}); w.Event != want {
		t.Errorf("event %+v, want %+v", w.Event, want)
	}
	if o := w.Origin; o == nil || *o != (provenance.Origin{Key: "k", Op: "SET", Version: v, Client: user}) || len(w.Chain) != 1 || w.Chain[0] != (provenance.Step{Rule: "copy.gorule", Key: "out", Op: "SET", Version: w.Version}) {
		t.Errorf("origin %+v, chain %+v", w.Origin, w.Chain)
	}

	e.set("k", "nx")
	handled(2)
	if w2, _ := e.host.Why("out"); w2.Value != "a" || w2.Version != w.Version {
		t.Errorf("a write not applied was journaled: %+v", w2)
	}

	e.set("k", "drop")
	handled(3)
	if w, _ := e.host.Why("out"); w.Op != "DEL" || w.Value != "" || w.ValueSize != 0 || w.Version != "" || w.Event.Key != "k" {
		t.Errorf("after a DEL: %+v", w)
	}
	// A new version's writes at load answer no event either, not the last
	// one the previous version handled.
	e.rt.register("copy2", goRule{init: boot})
	e.reload(p, "copy2")
	if w, _ := e.host.Why("boot"); w.Event != (provenance.Cause{}) || w.Origin != nil || len(w.Chain) != 1 {
		t.Errorf("a write at reload: event %+v, origin %+v, chain %+v; want none before it", w.Event, w.Origin, w.Chain)
	}

	logs := e.logs.String()
	for _, want := range []string{`msg="rule wrote" rule=copy.gorule key=out op=SET`, `msg="rule wrote" rule=copy.gorule key=out op=DEL`,
		"event_key=k event_op=SET", "chain=copy.gorule origin_key=k origin_client=" + user} {
		if !strings.Contains(logs, want) {
			t.Errorf("no debug line with %s in:\n%s", want, logs)
		}
	}
}
