package mailbox

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/timers"
)

func set(key string, v int) Delivery {
	return Delivery{Ev: abi.Event{Key: key, Op: abi.OpSet, Value: []byte(strconv.Itoa(v)), Version: fmt.Sprintf("%08d", v)}}
}

func del(key string, v int) Delivery {
	return Delivery{Ev: abi.Event{Key: key, Op: abi.OpDelete, Version: fmt.Sprintf("%08d", v)}}
}

func drain(m *Box) []Delivery {
	var out []Delivery
	for {
		d, ok := m.Pop()
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func describe(ds []Delivery) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprintf("%s:%s:%s/%d ", d.Ev.Key, d.Ev.Op, d.Ev.Value, d.Ev.Coalesced)
	}
	return s
}

// A full mailbox replaces a key's waiting change in its place and counts
// what it replaced; a DELETE after a SET is a DELETE.
func TestConflateKeepsPlaceAndLatest(t *testing.T) {
	m := New(3, 10, nil, nil)
	for i, k := range []string{"a", "b", "c"} {
		if m.Push(set(k, i)) != Queued {
			t.Fatalf("push %s into a mailbox with room refused", k)
		}
	}
	steps := []struct {
		d    Delivery
		want Outcome
	}{
		{set("a", 10), Coalesced},
		{set("d", 11), Queued}, // a new key: the bound of keys has room
		{set("a", 12), Coalesced},
		{del("b", 13), Coalesced},
		{set("d", 14), Coalesced},
	}
	for _, s := range steps {
		if got := m.Push(s.d); got != s.want {
			t.Fatalf("push %s %s: %d, want %d", s.d.Ev.Key, s.d.Ev.Op, got, s.want)
		}
	}
	got := describe(drain(m))
	if want := "a:SET:12/2 b:DELETE:/1 c:SET:2/0 d:SET:14/1 "; got != want {
		t.Fatalf("drained %q, want %q", got, want)
	}
	if m.idx != nil {
		t.Fatal("a drained mailbox keeps its index")
	}
	// Drained, it is a plain FIFO again: the same key queues twice.
	m.Push(set("a", 20))
	m.Push(set("a", 21))
	if got, want := describe(drain(m)), "a:SET:20/0 a:SET:21/0 "; got != want {
		t.Fatalf("after draining: %q, want %q", got, want)
	}
}

// Past the bound of keys a change of a key not waiting is dropped; a
// timer's firing is refused by a full mailbox (its owner keeps it); a
// resync is neither replaced nor replaces, and a change after it queues
// behind it.
func TestConflateBoundsAndNeverConflated(t *testing.T) {
	m := New(2, 3, nil, nil)
	m.Push(set("a", 1))
	m.Push(Delivery{Ev: abi.Event{Key: "b", Op: abi.OpSet, Value: []byte("2"), Resync: true}})
	if got := m.Push(Delivery{Ev: abi.Event{Key: "t", Op: abi.OpTimer}, Timer: &timers.Timer{Name: "t"}}); got != Dropped {
		t.Fatalf("a timer into a full mailbox: %d, want Dropped", got)
	}
	if got := m.Push(set("b", 3)); got != Queued {
		t.Fatalf("a change after a waiting resync: %d, want Queued", got)
	}
	if got := m.Push(set("c", 4)); got != Dropped {
		t.Fatalf("a new key past the bound of keys: %d, want Dropped", got)
	}
	if got := m.Push(set("b", 5)); got != Coalesced {
		t.Fatalf("b again: %d, want Coalesced into the change after the resync", got)
	}
	if got, want := describe(drain(m)), "a:SET:1/0 b:SET:2/0 b:SET:5/1 "; got != want {
		t.Fatalf("drained %q, want %q", got, want)
	}
}

// Property: for random bursts of changes over few keys, interleaved with
// pops, into mailboxes of random bounds, (1) every key's versions come out
// increasing, (2) the last event of each key seen is its last change
// unless a change was dropped, (3) the changes accounted for (events
// popped plus their Coalesced) plus the dropped equal the changes pushed,
// (4) no more than max(limit, keys) events ever wait.
func TestConflateProperty(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		limit, keys := 1+rng.IntN(8), rng.IntN(12)
		nkeys := 1 + rng.IntN(10)
		m := New(limit, keys, nil, nil)
		m.SetLatest(rng.IntN(3) == 0)
		last := map[string]int{}    // last change pushed
		seen := map[string]int{}    // last version popped
		lastOut := map[string]int{} // value of the last event popped
		pushed, accounted, dropped := 0, 0, 0
		lost := map[string]bool{}
		pop := func() {
			d, ok := m.Pop()
			if !ok {
				return
			}
			v, _ := strconv.Atoi(d.Ev.Version)
			if v <= seen[d.Ev.Key] {
				t.Fatalf("seed %d: key %s version %d after %d", seed, d.Ev.Key, v, seen[d.Ev.Key])
			}
			seen[d.Ev.Key] = v
			lastOut[d.Ev.Key] = v
			accounted += 1 + d.Ev.Coalesced
		}
		for v := 1; v <= 400; v++ {
			k := "k" + strconv.Itoa(rng.IntN(nkeys))
			d := set(k, v)
			if rng.IntN(4) == 0 {
				d = del(k, v)
			}
			pushed++
			last[k] = v
			switch m.Push(d) {
			case Dropped:
				dropped++
				lost[k] = true
			default:
				lost[k] = false
			}
			if n := m.Len(); n > max(limit, keys) {
				t.Fatalf("seed %d: %d events wait, bound max(%d, %d)", seed, n, limit, keys)
			}
			for rng.IntN(3) == 0 {
				pop()
			}
		}
		for m.Len() > 0 {
			pop()
		}
		if accounted+dropped != pushed {
			t.Fatalf("seed %d: %d handled (with coalesced) + %d dropped != %d pushed", seed, accounted, dropped, pushed)
		}
		for k, v := range last {
			if !lost[k] && lastOut[k] != v {
				t.Fatalf("seed %d: key %s ended at %d, its last change was %d", seed, k, lastOut[k], v)
			}
		}
	}
}

// In latest mode a key's change replaces its waiting one however few wait;
// other keys, resyncs and timers queue as in a FIFO.
func TestConflateLatestMode(t *testing.T) {
	m := New(100, 100, nil, nil)
	m.SetLatest(true)
	want := []Outcome{Queued, Coalesced, Queued, Coalesced, Queued}
	for i, d := range []Delivery{set("a", 1), set("a", 2), set("b", 3), del("a", 4),
		{Ev: abi.Event{Key: "t", Op: abi.OpTimer}, Timer: &timers.Timer{Name: "t"}}} {
		if got := m.Push(d); got != want[i] {
			t.Fatalf("push %d (%s %s): %d, want %d", i, d.Ev.Key, d.Ev.Op, got, want[i])
		}
	}
	if got, want := describe(drain(m)), "a:DELETE:/2 b:SET:3/0 t:TIMER:/0 "; got != want {
		t.Fatalf("drained %q, want %q", got, want)
	}
	m.SetLatest(false)
	m.Push(set("a", 5))
	if got := m.Push(set("a", 6)); got != Queued {
		t.Fatalf("queued mode with room: %d, want Queued", got)
	}
}

// A pattern scan's events (PushAlways) go in past both bounds, and are
// indexed: a later change of the key in the full mailbox queues behind a
// resync one and conflates into a plain one, in key order.
func TestPushAlwaysPastTheBoundsIndexed(t *testing.T) {
	m := New(1, 1, nil, nil)
	m.Push(set("a", 1))
	m.PushAlways(Delivery{Ev: abi.Event{Key: "s", Op: abi.OpSet, Value: []byte("2"), Resync: true}})
	m.PushAlways(set("p", 3))
	if got := m.Len(); got != 3 {
		t.Fatalf("%d events wait, want 3: PushAlways goes past the limit and the bound of keys", got)
	}
	if got := m.Push(set("s", 4)); got != Dropped {
		t.Fatalf("a change of s behind its resync, past the bound of keys: %d, want Dropped", got)
	}
	if got := m.Push(set("p", 5)); got != Coalesced {
		t.Fatalf("a change of p, whose scan event waits: %d, want Coalesced", got)
	}
	if got, want := describe(drain(m)), "a:SET:1/0 s:SET:2/0 p:SET:5/1 "; got != want {
		t.Fatalf("drained %q, want %q", got, want)
	}
}
