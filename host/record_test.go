package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// callLog is a Recorder that keeps what it is told as lines.
type callLog struct {
	mu    sync.Mutex
	lines []string
	last  map[string]int64
	back  bool // a rule's readings went back in time
}

func (l *callLog) add(rule string, atMs int64, s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]int64{}
	}
	if atMs < l.last[rule] || atMs == 0 {
		l.back = true
	}
	l.last[rule] = atMs
	l.lines = append(l.lines, rule+" "+s)
}

func (l *callLog) RecordEvent(rule string, atMs int64, ev abi.Event) {
	l.add(rule, atMs, fmt.Sprintf("event %s %s %q", ev.Op, ev.Key, ev.Value))
}

func (l *callLog) RecordCall(rule string, atMs int64, c Call) {
	s := fmt.Sprintf("call %s %s %q fence=%q -> %s", c.Verb, c.Key, c.Value, c.Fence, c.Status)
	switch {
	case c.Verb == "get":
		s += fmt.Sprintf(" %q found=%v", c.Result, c.Found)
	case c.Verb == "now" && c.Now != atMs:
		s += " (reading differs from its time)"
	case c.Verb == "lock" && c.Version == "":
		s += " (no token)"
	}
	l.add(rule, atMs, s)
}

func (l *callLog) RecordConnection(atMs int64, up bool) {
	l.add("", atMs, fmt.Sprint("connection up=", up))
}

func (l *callLog) of(rule string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if len(s) > len(rule) && s[:len(rule)+1] == rule+" " {
			out = append(out, s[len(rule)+1:])
		}
	}
	return out
}

// A Recorder sees what a rule saw: its calls at load, then each event
// before its handler runs, and each call with its reply, in order, on the
// host's clock (never back); a fenced write the store refused is recorded
// with FENCED.
func TestRecorderSeesCallsAndReplies(t *testing.T) {
	rec := &callLog{}
	e := newEnv(t, func(o *Config) { o.Recorder = rec })
	e.load("r", goRule{init: watchInit("in"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		v, _ := h.Get(ctx, "in")
		h.Now()
		if _, err := h.Lock(ctx, "lk", time.Minute, abi.LockOptions{}); err != nil {
			return err
		}
		_, err := h.Set(ctx, "out", v.Data, abi.SetOptions{Fence: "lk"})
		if abi.StatusOf(err) == abi.StatusFenced {
			return nil
		}
		return err
	}})
	e.set("in", "1")
	waitFor(t, "first event handled", func() bool { return e.status("r").Handled == 1 })
	// Another holder takes the lock behind the rule's back and writes with
	// its newer token.
	taken, err := e.user.Set(e.ctx(), []byte("lk"), []byte("another holder"), protocol.SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.user.Set(e.ctx(), []byte("out"), []byte("theirs"), protocol.SetOptions{FencingToken: taken.Version}); err != nil {
		t.Fatal(err)
	}
	e.set("in", "2")
	waitFor(t, "second event handled", func() bool { return e.status("r").Handled == 2 })
	want := []string{
		`call watch in "" fence="" -> OK`,
		`event SET in "1"`,
		`call get in "" fence="" -> OK "1" found=true`,
		`call now  "" fence="" -> OK`,
		`call lock lk "" fence="" -> OK`,
		`call set out "1" fence="lk" -> OK`,
		`event SET in "2"`,
		`call get in "" fence="" -> OK "2" found=true`,
		`call now  "" fence="" -> OK`,
		`call lock lk "" fence="" -> OK`,
		`call set out "2" fence="lk" -> FENCED`,
	}
	if got := rec.of("r.gorule"); !slices.Equal(got, want) {
		t.Fatalf("recorded\n  %q\nwant\n  %q", got, want)
	}
	if rec.back {
		t.Fatal("a recorded time went back or was zero")
	}
}
