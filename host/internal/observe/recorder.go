package observe

import (
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Recorder is told what the host's rules see, for a trace that replays
// them (`ssrun dev --record`, package testrun): every event a rule is about
// to handle, every host call a rule makes with the reply it got, and the
// store connection going down and up. Each call is made on the goroutine
// that saw it (a rule's worker, the dispatcher), in the order that
// goroutine saw it; calls of one rule never overlap. It must be fast and
// must not block or call the Host. atMs is the host's clock (hostClock, the
// clock rules read with now()), in Unix ms. A nil Config.Recorder costs
// nothing: rules get the binding itself, unwrapped.
//
// Not recorded: the calls of a canary's shadow (they never reach the
// store) and log lines. In a dry run the rules' calls are recorded with the
// replies of the staging layer they got.
type Recorder interface {
	// RecordEvent reports ev about to be handled by rule (the file name,
	// as in the logs): a notification with its value and version, a
	// timer's firing with its deadline, LOCK_LOST.
	RecordEvent(rule string, atMs int64, ev abi.Event)
	// RecordCall reports one host call of rule with its reply, once the
	// reply is known.
	RecordCall(rule string, atMs int64, c Call)
	// RecordConnection reports the store connection coming up or going
	// down.
	RecordConnection(atMs int64, up bool)
}

// Call is one host call of a rule and its reply, for a Recorder.
type Call struct {
	Verb  string // get, set, del, vdel, watch, unwatch, lock, unlock, timer, cancel, now, keys, watch_pattern, unwatch_pattern
	Key   string // the key, lock or timer name, or the pattern; empty for now
	Value []byte // set's value, vdel's expected value, timer's payload
	Cond  abi.Condition
	TTL   time.Duration // set's ttl, lock's lease
	Wait  time.Duration // lock
	Every time.Duration // timer's period; Delay is in TTL
	Fence string        // set, del, vdel
	Self  bool          // watch, watch_pattern
	Limit int           // keys

	// The reply: its status, with the error's message when not OK.
	Status abi.Status
	Err    string
	// Result is get's value; Version get's or set's version, lock's
	// fencing token; Now now's reading (Unix ms).
	Result  []byte
	Found   bool
	Version string
	Now     int64
	Keys    []string // keys' result
}
