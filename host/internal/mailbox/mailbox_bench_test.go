package mailbox

import (
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// BenchmarkPushPop is the unloaded path: one event pushed and popped at a
// time, as a rule that keeps up sees its mailbox.
func BenchmarkPushPop(b *testing.B) {
	m := New(1024, 65536, nil, nil)
	d := Delivery{Ev: abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "1"}}
	b.ReportAllocs()
	for b.Loop() {
		m.Push(d)
		m.Pop()
	}
}
