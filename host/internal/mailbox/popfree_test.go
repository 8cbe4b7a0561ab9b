package mailbox

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// TestPopFreeSkipsBusyKeys: PopFree takes the oldest event of a key not
// busy, and the busy key's events keep their order and their place.
func TestPopFreeSkipsBusyKeys(t *testing.T) {
	m := New(100, 100, nil, nil)
	for i, k := range []string{"a", "a", "b", "c", "b"} {
		m.Push(Delivery{Ev: abi.Event{Key: k, Op: abi.OpSet, Version: strconv.Itoa(i)}})
	}
	busy := map[string]bool{"a": true}
	isBusy := func(d *Delivery) bool { return busy[d.Ev.Key] }
	var got []string
	for {
		d, ok := m.PopFree(isBusy)
		if !ok {
			break
		}
		got = append(got, d.Ev.Key+d.Ev.Version)
		busy[d.Ev.Key] = true
	}
	if want := "b2 c3"; join(got) != want {
		t.Fatalf("popped %s, want %s", join(got), want)
	}
	if m.Len() != 3 {
		t.Fatalf("Len %d, want 3 (a0 a1 b4)", m.Len())
	}
	busy = map[string]bool{}
	got = got[:0]
	for {
		d, ok := m.PopFree(isBusy)
		if !ok {
			break
		}
		got = append(got, d.Ev.Key+d.Ev.Version)
	}
	if want := "a0 a1 b4"; join(got) != want {
		t.Fatalf("then popped %s, want %s", join(got), want)
	}
	if m.Len() != 0 || len(m.q) != 0 || m.holes != 0 {
		t.Fatalf("drained: Len %d, q %d, holes %d", m.Len(), len(m.q), m.holes)
	}
}

// TestPopFreeConflatesAroundHoles: in mode latest, changes of a key wait
// as one event while the key is busy, and a mailbox with holes conflates
// and pops in order, and Pop (a concurrency lowered) skips the holes.
func TestPopFreeConflatesAroundHoles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		m := New(8, 16, nil, nil)
		m.SetLatest(round%2 == 0)
		last := map[string]int{}    // last version pushed, per key
		handled := map[string]int{} // last version popped, per key
		busy := map[string]bool{}
		var inFlight []string
		v := 0
		for step := 0; step < 300; step++ {
			switch rng.IntN(3) {
			case 0, 1:
				k := "k" + strconv.Itoa(rng.IntN(5))
				v++
				if m.Push(Delivery{Ev: abi.Event{Key: k, Op: abi.OpSet, Version: strconv.Itoa(v)}}) != Dropped {
					last[k] = v
				}
			case 2:
				if len(inFlight) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(inFlight))
					delete(busy, inFlight[i])
					inFlight = append(inFlight[:i], inFlight[i+1:]...)
					continue
				}
				pop := func() (Delivery, bool) {
					if round%7 == 0 && len(inFlight) == 0 {
						return m.Pop()
					}
					return m.PopFree(func(d *Delivery) bool { return busy[d.Ev.Key] })
				}
				d, ok := pop()
				if !ok {
					continue
				}
				n, _ := strconv.Atoi(d.Ev.Version)
				if busy[d.Ev.Key] {
					t.Fatalf("round %d: popped busy key %s", round, d.Ev.Key)
				}
				if n <= handled[d.Ev.Key] {
					t.Fatalf("round %d: key %s version %d after %d", round, d.Ev.Key, n, handled[d.Ev.Key])
				}
				handled[d.Ev.Key] = n
				busy[d.Ev.Key] = true
				inFlight = append(inFlight, d.Ev.Key)
			}
		}
		clear(busy)
		for {
			d, ok := m.PopFree(func(*Delivery) bool { return false })
			if !ok {
				break
			}
			n, _ := strconv.Atoi(d.Ev.Version)
			if n <= handled[d.Ev.Key] {
				t.Fatalf("round %d drain: key %s version %d after %d", round, d.Ev.Key, n, handled[d.Ev.Key])
			}
			handled[d.Ev.Key] = n
		}
		for k, n := range last {
			if handled[k] != n {
				t.Fatalf("round %d: key %s last handled %d, last pushed %d", round, k, handled[k], n)
			}
		}
		if m.Len() != 0 {
			t.Fatalf("round %d: Len %d after draining", round, m.Len())
		}
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}
