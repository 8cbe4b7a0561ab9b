package host

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// A dry run (Config.DryRun) runs the rules on live notifications without
// changing the store. What a rule would write is staged in an overlay, one
// per host and shared by its rules as the store is:
//
//   - set, del and vdel are checked as usual (permissions, sizes, NX/NEX,
//     not found, value differs, fencing), against the overlay first and
//     the store behind it, then staged and reported; never sent;
//   - get sees the staged writes of every rule of the host, then the store;
//     a staged set with a ttl reads as absent once the ttl has passed;
//   - lock and unlock are staged writes of the lock key (SET NEX, VDEL): a
//     lock held in the store by anyone, or staged by another rule, is BUSY
//     at once (a dry run does not wait); a staged lock never expires (the
//     host would renew it) and is never lost; a write fenced with a lock is
//     staged when the rule holds the lock in the overlay;
//   - timers work, but are kept in memory only, not in the store: a dry run
//     starts with no timers, and leaves those of a real run untouched;
//   - staged writes produce no notifications: no rule is notified of
//     another's staged write (a chain of rules stops at the first), and a
//     staged ttl ends without a DELETE event.

// StagedWrite is a write a rule made during a dry run: staged in the
// overlay, or refused, and never sent to the store.
type StagedWrite struct {
	Rule  string
	Op    string // SET, DEL, VDEL, LOCK or UNLOCK
	Key   string
	Value []byte        // SET: the value; VDEL: the value compared; LOCK, UNLOCK: the holder
	TTL   time.Duration // SET: its expiry; LOCK: the lease's (a staged lock does not expire)
	Cond  string        // NX or NEX
	Fence string        // the lock the write is fenced with
	// Err is why the write was refused (condition not met, value differs,
	// lock busy or not held, fencing); empty when it was staged.
	Err string
	// Note says why a harmless write changed nothing: a DEL or VDEL of a
	// key that is absent ("nothing to delete"). It is no failure: the rule
	// gets NOT_FOUND, as from the store, and a real run would do the same.
	Note string
	// Cause is the event the rule was handling; zero for a write outside a
	// handler (at load, or from a plugin's own goroutine).
	Cause Cause
}

// String is the write as one line: `dry-run: SET hvac1/target "28" (rule
// thermostat.lua, event SET thermostat1/setPoint v=...)`.
func (w StagedWrite) String() string {
	var b strings.Builder
	b.WriteString("dry-run: ")
	b.WriteString(w.Op)
	b.WriteString(" ")
	b.WriteString(w.Key)
	if w.Op == "SET" || w.Op == "VDEL" {
		b.WriteString(" " + strconv.Quote(string(w.Value)))
	}
	if w.Cond != "" {
		b.WriteString(" " + w.Cond)
	}
	if w.TTL > 0 {
		b.WriteString(" PX " + w.TTL.String())
	}
	if w.Fence != "" {
		b.WriteString(" fenced by " + strconv.Quote(w.Fence))
	}
	b.WriteString(" (rule " + w.Rule)
	if w.Cause.Op != "" {
		b.WriteString(", event " + w.Cause.Op + " " + w.Cause.Key)
		if w.Cause.Version != "" {
			b.WriteString(" v=" + w.Cause.Version)
		}
	} else {
		b.WriteString(", outside a handler")
	}
	b.WriteString(")")
	switch {
	case w.Err != "":
		b.WriteString(": not staged: " + w.Err)
	case w.Note != "":
		b.WriteString(": " + w.Note)
	}
	return b.String()
}

// dryRunNode is the node of the versions the overlay makes.
const dryRunNode = "dry-run"

// overlay holds the staged writes of a dry run.
type overlay struct {
	report func(StagedWrite)
	nowMs  func() int64

	wmu sync.Mutex // one write at a time: its checks and its staging
	mu  sync.Mutex
	m   map[string]staged
	seq uint64
}

// staged is a key's staged state: a value, or deleted.
type staged struct {
	value   []byte
	deleted bool
	version hlc.HLC
	expires int64 // Unix ms on the host clock; 0: never
}

func newOverlay(report func(StagedWrite), nowMs func() int64) *overlay {
	return &overlay{report: report, nowMs: nowMs, m: map[string]staged{}}
}

// lookup reads key from the overlay, or from the store through c.
func (o *overlay) lookup(ctx context.Context, c Store, key string) (value []byte, version hlc.HLC, found bool, err error) {
	o.mu.Lock()
	s, ok := o.m[key]
	o.mu.Unlock()
	if ok {
		if s.deleted || (s.expires != 0 && o.nowMs() >= s.expires) {
			return nil, hlc.HLC{}, false, nil
		}
		return s.value, s.version, true, nil
	}
	res, err := c.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return nil, hlc.HLC{}, false, storeError(err)
	}
	return res.Value, res.Version, res.Found, nil
}

// get implements the binding's Get in a dry run.
func (o *overlay) get(ctx context.Context, c Store, key string) (abi.Value, error) {
	v, ver, found, err := o.lookup(ctx, c, key)
	if err != nil {
		return abi.Value{}, err
	}
	if !found {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: v, Version: ver.String()}, nil
}

// stage records w's key as value (deleted when del), reports w and returns
// the new version.
func (o *overlay) stage(w StagedWrite, value []byte, del bool) string {
	o.mu.Lock()
	o.seq++
	s := staged{value: bytes.Clone(value), deleted: del, version: hlc.HLC{Wall: o.nowMs(), Counter: o.seq, Node: dryRunNode}}
	if w.TTL > 0 && w.Op == "SET" { // a staged lock is held until unlocked
		s.expires = s.version.Wall + w.TTL.Milliseconds()
	}
	o.m[w.Key] = s
	o.mu.Unlock()
	o.report(w)
	return s.version.String()
}

// refuse reports w as not staged, for err, and returns err.
func (o *overlay) refuse(w StagedWrite, err error) error {
	w.Err = err.Error()
	o.report(w)
	return err
}

// fenced checks that holder holds the lock w.Fence (if any) in the overlay.
func (o *overlay) fenced(w StagedWrite, holder string) error {
	if w.Fence == "" {
		return nil
	}
	o.mu.Lock()
	s, ok := o.m[w.Fence]
	o.mu.Unlock()
	if !ok || s.deleted || string(s.value) != holder {
		return abi.Errorf(abi.StatusLockLost, "%s %q: fenced with lock %q, which rule %s does not hold", strings.ToLower(w.Op), w.Key, w.Fence, w.Rule)
	}
	return nil
}

// set stages a rule's set (w.Op SET, or LOCK for a lock's SET NEX), fenced
// with the rule's locks, which holder names; when the NX or NEX condition
// fails, it refuses it with unmet. Keys not staged are read through c.
func (o *overlay) set(ctx context.Context, c Store, w StagedWrite, holder string, nx, nex bool, unmet error) (string, error) {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if err := o.fenced(w, holder); err != nil {
		return "", o.refuse(w, err)
	}
	cur, ver, found, err := o.lookup(ctx, c, w.Key)
	if err != nil {
		return "", err
	}
	if (nx && found) || (nex && found && !bytes.Equal(cur, w.Value)) {
		return ver.String(), o.refuse(w, unmet)
	}
	return o.stage(w, w.Value, false), nil
}

// del stages a rule's del, or its vdel (w.Op VDEL, or UNLOCK) of w.Value;
// see set.
func (o *overlay) del(ctx context.Context, c Store, w StagedWrite, holder string) error {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	verb := strings.ToLower(w.Op)
	if err := o.fenced(w, holder); err != nil {
		return o.refuse(w, err)
	}
	cur, _, found, err := o.lookup(ctx, c, w.Key)
	if err != nil {
		return err
	}
	switch {
	case !found && w.Op == "UNLOCK":
		return o.refuse(w, abi.Errorf(abi.StatusNotFound, "%s %q: not found", verb, w.Key))
	case !found: // the store would answer the same, changing nothing
		w.Note = "nothing to delete (not found)"
		o.report(w)
		return abi.Errorf(abi.StatusNotFound, "%s %q: not found", verb, w.Key)
	case w.Op != "DEL" && !bytes.Equal(cur, w.Value):
		return o.refuse(w, abi.Errorf(abi.StatusNotApplied, "%s %q: value differs", verb, w.Key))
	}
	o.stage(w, nil, true)
	return nil
}

// lock stages a rule's lock w (w.Op LOCK, w.Value the rule's holder): its
// key set to the holder, NEX. The token is the staged version.
func (o *overlay) lock(ctx context.Context, c Store, w StagedWrite) (string, error) {
	if w.TTL < time.Millisecond {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be at least 1 ms", w.Key)
	}
	tok, err := o.set(ctx, c, w, string(w.Value), false, true, abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", w.Key))
	if err != nil {
		return "", err
	}
	return tok, nil
}

// unlock stages a rule's unlock w (w.Op UNLOCK, w.Value the rule's holder):
// a VDEL of the holder.
func (o *overlay) unlock(ctx context.Context, c Store, w StagedWrite) error {
	err := o.del(ctx, c, w, string(w.Value))
	if s := abi.StatusOf(err); s == abi.StatusNotFound || s == abi.StatusNotApplied {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held by this rule", w.Key)
	}
	return err
}

// condName names an abi condition in a StagedWrite.
func condName(c abi.Condition) string {
	switch c {
	case abi.CondNX:
		return "NX"
	case abi.CondNEX:
		return "NEX"
	}
	return ""
}

// memKV is a store of keys in memory: where a dry run keeps its timers.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemKV() *memKV { return &memKV{m: map[string][]byte{}} }

func (s *memKV) Get(_ context.Context, key []byte, _ protocol.CallOptions) (protocol.GetResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(key)]
	return protocol.GetResult{Value: v, Found: ok}, nil
}

func (s *memKV) Set(_ context.Context, key, value []byte, _ protocol.SetOptions) (protocol.SetResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[string(key)] = bytes.Clone(value)
	return protocol.SetResult{Applied: true}, nil
}

func (s *memKV) Del(_ context.Context, key []byte, _ protocol.DelOptions) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[string(key)]; !ok {
		return 0, nil
	}
	delete(s.m, string(key))
	return 1, nil
}

// keyStore is what timers need of the store: the client, or a memKV in a
// dry run.
type keyStore interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
	Del(ctx context.Context, key []byte, opts protocol.DelOptions) (int64, error)
}
