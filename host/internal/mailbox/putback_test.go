package mailbox

import (
	"testing"
)

// TestPutBackComesFirstAndKeepsKeyOrder: an event put back is taken
// first again, before the events that waited behind it, whether the queue
// had moved its head or not; a newer change of its key still comes after
// it, and a full mailbox conflates a later change into the newest waiting
// change of the key, not into the event put back.
func TestPutBackComesFirstAndKeepsKeyOrder(t *testing.T) {
	for _, popped := range []int{1, 3} {
		m := New(4, 8, nil, nil)
		for i, k := range []string{"a", "b", "c", "a"} {
			m.Push(set(k, i))
		}
		var taken []Delivery
		for range popped {
			d, _ := m.Pop()
			taken = append(taken, d)
		}
		for i := len(taken) - 1; i >= 0; i-- { // the newest back first: the oldest ends up at the head
			m.PutBack(taken[i])
		}
		if m.Len() != 4 {
			t.Fatalf("popped %d: Len %d after putting back, want 4", popped, m.Len())
		}
		m.Push(set("a", 9)) // full: coalesces into a's newest waiting change (a:3)
		if got, want := describe(drain(m)), "a:SET:0/0 b:SET:1/0 c:SET:2/0 a:SET:9/1 "; got != want {
			t.Errorf("popped %d: drained %s, want %s", popped, got, want)
		}
	}
}

// TestPutBackIndexesItsKey: a change of a key whose only waiting event was
// put back conflates into it (the index knows it).
func TestPutBackIndexesItsKey(t *testing.T) {
	m := New(2, 8, nil, nil)
	m.Push(set("a", 1))
	m.Push(set("b", 2))
	d, _ := m.Pop()
	m.Push(set("c", 3)) // full again: indexed
	m.PutBack(d)
	m.Push(set("a", 4)) // full: replaces a:1, put back, in its place
	if got, want := describe(drain(m)), "a:SET:4/1 b:SET:2/0 c:SET:3/0 "; got != want {
		t.Errorf("drained %s, want %s", got, want)
	}
}
