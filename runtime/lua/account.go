package lua

import (
	"fmt"
	"runtime/metrics"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// A rule's memory is what its state holds: the tables, strings and
// functions reachable from its globals, registry and value stack, as
// stateBytes estimates them. abi.Limits.MemoryBytes caps it, and only the
// rule itself is ever measured or stopped, on its own goroutine:
//
//   - Every builtin that makes a string (the .. operator, string.format,
//     rep, gsub, upper, lower, reverse, sub, table.concat, ss.get...)
//     reserves its result's size before allocating it. Builders' results
//     are counted as held until the next measure; when a reservation would
//     take the account past the limit, the state is measured first (garbage
//     does not count), and if it still would, the builder fails the call
//     with abi.ErrMemory at the rule's line, having allocated nothing. So
//     one expression cannot build past the limit, whatever it chains.
//   - What gopher-lua's VM allocates itself (tables growing, closures) is
//     not seen as it happens. Every hookInterval instructions of the rule
//     (counted across its calls), the call in progress looks at the process
//     heap; when it has grown by enough since the rule was last measured
//     that the rule could be past its limit, the rule measures itself and
//     is stopped if it is. A call blocked in a host
//     verb runs no instruction, so it is never measured nor blamed for
//     another rule's memory.
type account struct {
	limit int64
	// held is the state's size at the last measure; charged is what
	// builders have reserved since.
	held, charged int64
	// baseLive and baseAllocs are the process heap at the last measure.
	baseLive, baseAllocs uint64
	// pending is what a builder in progress has reserved for a result it
	// keeps outside the state until it is done (ss.json.encode's output):
	// a measure counts it, as it cannot see it.
	pending int64
}

// maxArrayIndex bounds what one table store can allocate. gopher-lua keeps
// integer keys below glua.MaxArrayIndex (64 Mi by default) in a table's
// array part and fills the array with nils up to a new key in one step, so
// `t[6e7] = 1` allocated 1 GiB (5 GiB with the copies as it grew) inside a
// single instruction, before anything could look. With 4 Mi, one store
// makes an array of at most 64 MiB (about 320 MiB allocated in all, as
// append grows it by a quarter at a time); keys beyond go to the hash
// part, as far keys do in Lua. (gopher-lua's # and ipairs only see the array part, so a
// sequence longer than 4 Mi elements, 64 MiB of array, is not one for
// them; with the default memory limit a rule cannot build one anyway.)
const maxArrayIndex = 1 << 22

func init() { glua.MaxArrayIndex = maxArrayIndex }

// Readings of the Go heap (~300 ns together):
//   - liveMetric, the live heap as of the last garbage collection: garbage
//     does not count, so churn elsewhere does not trigger measures; memory
//     a rule keeps reachable shows once a collection completes;
//   - allocsMetric, all bytes allocated since the process started: it
//     moves at once, so it catches a rule that outruns the collector.
const (
	liveMetric   = "/gc/heap/live:bytes"
	allocsMetric = "/gc/heap/allocs:bytes"
)

func heapReadings() (live, allocs uint64) {
	s := [2]metrics.Sample{{Name: liveMetric}, {Name: allocsMetric}}
	metrics.Read(s[:])
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// backstop is how much the process may allocate (garbage included) before
// a running rule measures itself although no collection has shown growth:
// far above ordinary churn, it catches a rule that outruns the collector.
func backstop(limit int64) uint64 { return uint64(2*limit + 64<<20) }

func newAccount(limit int64) account {
	a := account{limit: limit}
	a.baseLive, a.baseAllocs = heapReadings()
	return a
}

// reserve accounts n bytes a builder named what is about to allocate in L,
// or fails the call with abi.ErrMemory (or its deadline) without returning.
func (st *state) reserve(L *glua.LState, what string, n int64) {
	a := &st.acct
	if st.tryReserve(n) {
		return
	}
	if n > a.limit {
		st.refuse(L, fmt.Sprintf("%s: %d bytes exceed the rule's memory limit of %d bytes", what, n, a.limit))
	}
	if ok, err := st.measure(n); err != nil {
		L.RaiseError("%v", err) // the deadline came first
	} else if !ok {
		st.refuse(L, fmt.Sprintf("%s: %d more bytes would take the rule past its memory limit of %d bytes (it holds about %d)", what, n, a.limit, a.held))
	}
	a.charged += n
}

// tryReserve is reserve's fast path: it accounts n bytes if they fit
// without measuring the state, and reports whether they did.
func (st *state) tryReserve(n int64) bool {
	a := &st.acct
	if n > a.limit-a.held-a.charged {
		return false
	}
	a.charged += n
	return true
}

// reserveProduct is reserve for count copies of size bytes, refused without
// computing a product that overflows.
func (st *state) reserveProduct(L *glua.LState, what string, count, size int64) {
	if count > 0 && size > 0 && count > st.acct.limit/size {
		st.refuse(L, fmt.Sprintf("%s: %d x %d bytes exceed the rule's memory limit of %d bytes", what, count, size, st.acct.limit))
	}
	st.reserve(L, what, max(count, 0)*size)
}

// tick runs every hookInterval instructions of the rule: it measures the
// state when the heap has grown enough that it could be past its limit,
// and stops the call if it is.
func (st *state) tick() {
	a := &st.acct
	live, allocs := heapReadings()
	grown := max(int64(live)-int64(a.baseLive), 0)
	if a.held+a.charged+grown <= a.limit && allocs-a.baseAllocs <= backstop(a.limit) {
		return
	}
	if ok, _ := st.measure(0); !ok {
		st.stop(fmt.Errorf("%w: the rule holds about %d bytes, more than its limit of %d", abi.ErrMemory, st.acct.held, st.acct.limit))
	}
}

// measure walks the state and re-bases the account; it reports whether the
// state holds at most limit-need bytes, or the call's context error if it
// ends during the walk (the call is being stopped anyway).
func (st *state) measure(need int64) (bool, error) {
	a := &st.acct
	held, over, err := stateBytes(st.ctx(), st.L, a.limit-need-a.pending, st.strMeta)
	if err != nil {
		return true, err
	}
	a.held, a.charged = held+a.pending, 0
	a.baseLive, a.baseAllocs = heapReadings()
	return !over, nil
}

// refuse stops the call with abi.ErrMemory and raises msg in L.
func (st *state) refuse(L *glua.LState, msg string) {
	if err := st.ctx().Err(); err != nil {
		L.RaiseError("%v", err) // the deadline came first
	}
	st.stop(fmt.Errorf("%w: %s", abi.ErrMemory, msg))
	L.RaiseError("%s", msg)
}
