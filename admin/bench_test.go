package admin_test

import (
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/protocol"
)

// BenchmarkObserve is what metrics add to one rule event of the end-to-end
// flow (a handler call, a GET and a SET): the observers' work per call.
func BenchmarkObserve(b *testing.B) {
	m := admin.NewMetrics()
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveHandle("rule.lua", 40*time.Microsecond, false)
		m.ObserveRequest("get", protocol.OutcomeOK, 300*time.Microsecond)
		m.ObserveRequest("set", protocol.OutcomeOK, 300*time.Microsecond)
	}
}
