package mailbox

import (
	"strconv"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

func TestMailboxBoundedFIFO(t *testing.T) {
	m := New(100, 0, nil, nil)
	next := 0
	pushed := 0
	// Interleave pushes and pops so the queue compacts and wraps.
	for round := 0; round < 50; round++ {
		for i := 0; i < 7; i++ {
			if m.Push(Delivery{Ev: abi.Event{Key: strconv.Itoa(pushed)}}) == Queued {
				pushed++
			}
		}
		for i := 0; i < 5; i++ {
			d, ok := m.Pop()
			if !ok {
				t.Fatalf("round %d: empty with %d waiting", round, pushed-next)
			}
			if d.Ev.Key != strconv.Itoa(next) {
				t.Fatalf("popped %s, want %d", d.Ev.Key, next)
			}
			next++
		}
	}
	// Each round ends with 5 popped from a full
	if got := m.Len(); got != 95 || pushed-next != 95 {
		t.Fatalf("len %d, pushed-popped %d, want 95", got, pushed-next)
	}
	for i := 0; i < 5; i++ {
		if m.Push(Delivery{Ev: abi.Event{Key: strconv.Itoa(pushed)}}) != Queued {
			t.Fatalf("push %d of 5 into a mailbox of 95/100 refused", i)
		}
		pushed++
	}
	if m.Push(Delivery{}) != Dropped {
		t.Fatal("push beyond the bound succeeded")
	}
	for m.Len() > 0 {
		d, _ := m.Pop()
		if d.Ev.Key != strconv.Itoa(next) {
			t.Fatalf("popped %s, want %d", d.Ev.Key, next)
		}
		next++
	}
	if m.q != nil {
		t.Fatalf("drained mailbox keeps %d slots of memory", cap(m.q))
	}
	if _, ok := m.Pop(); ok {
		t.Fatal("pop from an empty mailbox")
	}
}

// An idle rule's mailbox holds no memory however large its bound.
func TestMailboxAllocatesOnDemand(t *testing.T) {
	m := New(1<<20, 0, nil, nil)
	if cap(m.q) != 0 {
		t.Fatalf("new mailbox allocated %d slots", cap(m.q))
	}
	m.Push(Delivery{})
	if cap(m.q) > 8 {
		t.Fatalf("one event allocated %d slots", cap(m.q))
	}
}
