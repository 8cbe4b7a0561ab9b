package ruletimers

import (
	"github.com/ssrun/ssrun/host/internal/timers"
)

// t0 is where the tests' clocks start (Unix ms, in 2024).
const t0 int64 = 1_732_000_000_000

// stillClock is a timers.TimeSource that stays at t0 and whose alarms
// never ring: the tests call Fire themselves.
type stillClock struct{}

func (stillClock) NowMs() int64           { return t0 }
func (stillClock) NewAlarm() timers.Alarm { return stillAlarm{} }

type stillAlarm struct{}

func (stillAlarm) C() <-chan struct{} { return nil }
func (stillAlarm) SetAt(int64)        {}
func (stillAlarm) Stop()              {}
func (stillAlarm) Took()              {}

// version is a version of a rule, as the host's *instance is. It is not
// of size zero, so that two are never the same.
type version struct{ _ int }

func (*version) Replaced() bool { return false }
