// Package hlc implements the hybrid logical clock of the Azure IoT Operations
// state store (statestore-protocol.md §10): the text form
// `<wallMs>:<counter>:<nodeId>`, its total order, the update rules and the
// one-minute skew rule.
package hlc

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxSkew is how far ahead of the local wall clock a received timestamp may be.
const MaxSkew = time.Minute

// MaxCounter is the largest counter the wire format allows. The text form
// admits any decimal, but every SDK must be able to hold the value: the .NET
// SDK keeps counters in an int, and the Go and Rust SDKs fail when a counter
// they merge cannot be incremented. A clock never issues more; Parse refuses
// more as malformed, so a peer cannot hand a clock a counter it could not
// advance.
const MaxCounter = math.MaxInt32

var (
	// ErrMalformed reports text that is not an HLC.
	ErrMalformed = errors.New("hlc: malformed timestamp")
	// ErrSkew reports a timestamp more than MaxSkew ahead of the wall clock.
	ErrSkew = errors.New("hlc: timestamp too far in the future")
)

// HLC is one hybrid logical clock value. The zero value means "no version".
type HLC struct {
	Wall    int64  // milliseconds since the Unix epoch, >= 0
	Counter uint64 // logical counter
	Node    string // opaque id of the clock's owner; never contains ':'
}

// Parse accepts `wall:counter:node` with decimal wall (fits int64, i.e. u63)
// and counter (at most MaxCounter), leading zeros allowed (padded or not),
// and a non-empty node without ':'. Errors wrap ErrMalformed.
func Parse(s string) (HLC, error) {
	w, rest, ok := strings.Cut(s, ":")
	if !ok {
		return HLC{}, fmt.Errorf("%w: %q has no ':'", ErrMalformed, s)
	}
	c, node, ok := strings.Cut(rest, ":")
	if !ok {
		return HLC{}, fmt.Errorf("%w: %q has only two parts", ErrMalformed, s)
	}
	if node == "" || strings.IndexByte(node, ':') >= 0 {
		return HLC{}, fmt.Errorf("%w: %q: node id must be non-empty and without ':'", ErrMalformed, s)
	}
	if !allDigits(w) || !allDigits(c) {
		return HLC{}, fmt.Errorf("%w: %q: wall time and counter must be decimal digits", ErrMalformed, s)
	}
	wall, err := strconv.ParseInt(w, 10, 64)
	if err != nil {
		return HLC{}, fmt.Errorf("%w: %q: wall time out of range", ErrMalformed, s)
	}
	counter, err := strconv.ParseUint(c, 10, 64)
	if err != nil || counter > MaxCounter {
		return HLC{}, fmt.Errorf("%w: %q: counter out of range (at most %d)", ErrMalformed, s, MaxCounter)
	}
	return HLC{Wall: wall, Counter: counter, Node: node}, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats h in the padded form the SDKs emit: `%015d:%05d:%s`.
func (h HLC) String() string {
	return string(h.AppendText(make([]byte, 0, 22+len(h.Node))))
}

// AppendText appends the padded text form of h to b.
func (h HLC) AppendText(b []byte) []byte {
	b = appendPadded(b, uint64(h.Wall), 15)
	b = append(b, ':')
	b = appendPadded(b, h.Counter, 5)
	b = append(b, ':')
	return append(b, h.Node...)
}

func appendPadded(b []byte, v uint64, width int) []byte {
	var buf [20]byte
	d := strconv.AppendUint(buf[:0], v, 10)
	for i := len(d); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, d...)
}

// IsZero reports whether h carries no version (wall time zero), the Go SDK's
// convention.
func (h HLC) IsZero() bool { return h.Wall == 0 }

// Compare orders by wall time, then counter, then node id (byte-wise).
func (h HLC) Compare(o HLC) int {
	switch {
	case h.Wall < o.Wall:
		return -1
	case h.Wall > o.Wall:
		return 1
	case h.Counter < o.Counter:
		return -1
	case h.Counter > o.Counter:
		return 1
	}
	return strings.Compare(h.Node, o.Node)
}

// CheckSkew returns an error wrapping ErrSkew when h's wall time is more than
// MaxSkew ahead of now (strictly greater, §10.3). Past values always pass.
func CheckSkew(h HLC, now time.Time) error {
	if h.Wall-now.UnixMilli() > MaxSkew.Milliseconds() {
		return fmt.Errorf("%w: %s is %v ahead of the local clock", ErrSkew, h, time.Duration(h.Wall-now.UnixMilli())*time.Millisecond)
	}
	return nil
}

// Clock is a goroutine-safe HLC owned by one node. Its values strictly
// increase and it can always issue the next one: values it merges are
// bounded (within MaxSkew of the wall clock, counters at most MaxCounter),
// and a counter that would pass MaxCounter carries into the wall time
// (wall+1 ms, counter 0), which keeps the order and stays ahead of every
// value seen. A carry needs MaxCounter values within one millisecond, so the
// clock runs ahead of the wall clock by at most a millisecond per such burst
// on top of what it merged.
type Clock struct {
	mu   sync.Mutex
	cur  HLC
	now  func() time.Time
	skew time.Duration
}

// NewClock returns a clock for node. now defaults to time.Now.
func NewClock(node string, now func() time.Time) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{cur: HLC{Node: node}, now: now, skew: MaxSkew}
}

// Node returns the clock's node id.
func (c *Clock) Node() string { return c.cur.Node }

// Now returns the current value without advancing it.
func (c *Clock) Now() HLC {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Tick advances the clock for a local event and returns the new value:
// (now, 0) if the wall clock moved past the last value, else (last, c+1).
func (c *Clock) Tick() HLC {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixMilli()
	if now > c.cur.Wall {
		c.cur.Wall, c.cur.Counter = now, 0
		return c.cur
	}
	c.cur = next(c.cur.Node, c.cur.Wall, c.cur.Counter)
	return c.cur
}

// Recv merges a received value r and returns the new value, which is strictly
// greater than both r and every value this clock returned before. r more than
// MaxSkew ahead of the wall clock is refused (ErrSkew), and a counter above
// MaxCounter as malformed (ErrMalformed); either changes nothing. This is
// the server's recv() rule of §10.4.
func (c *Clock) Recv(r HLC) (HLC, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nowT := c.now()
	if err := check(r, nowT); err != nil {
		return HLC{}, err
	}
	c.cur = merge(c.cur, r, nowT.UnixMilli())
	return c.cur, nil
}

// Observe folds a value seen from another node into the clock without
// issuing a new one, as the SDK clients do with every `__ts` they receive:
// afterwards the clock is at least r's (wall, counter). A value from this
// clock's own node is ignored. A value more than MaxSkew ahead of the wall
// clock (ErrSkew) or with a counter above MaxCounter (ErrMalformed) is
// refused and changes nothing.
func (c *Clock) Observe(r HLC) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Node == c.cur.Node {
		return nil
	}
	if err := check(r, c.now()); err != nil {
		return err
	}
	if r.Wall > c.cur.Wall || (r.Wall == c.cur.Wall && r.Counter > c.cur.Counter) {
		c.cur.Wall, c.cur.Counter = r.Wall, r.Counter
	}
	return nil
}

// check refuses a value a clock must not merge.
func check(r HLC, now time.Time) error {
	if r.Counter > MaxCounter || r.Wall < 0 {
		return fmt.Errorf("%w: %s: counter above %d", ErrMalformed, r, MaxCounter)
	}
	return CheckSkew(r, now)
}

// next is the value after (wall, counter): the counter incremented, or
// carried into the wall time at MaxCounter.
func next(node string, wall int64, counter uint64) HLC {
	if counter >= MaxCounter {
		return HLC{Wall: wall + 1, Node: node}
	}
	return HLC{Wall: wall, Counter: counter + 1, Node: node}
}

func merge(l, r HLC, now int64) HLC {
	switch {
	case now > l.Wall && now > r.Wall:
		return HLC{Wall: now, Node: l.Node}
	case l.Wall == r.Wall:
		return next(l.Node, l.Wall, max(l.Counter, r.Counter))
	case l.Wall > r.Wall:
		return next(l.Node, l.Wall, l.Counter)
	default:
		return next(l.Node, r.Wall, r.Counter)
	}
}
