package store

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
)

// This file is the key-value store itself (statestore-protocol.md §6, §11,
// §12, §13.1-13.2): entries with HLC versions, PX expiry, fencing tokens, the
// key quota and KEYNOTIFY registrations. It knows nothing about MQTT. With a
// data directory every change is journaled before memory changes (see
// persist.go).

// nodeID is the HLC node id of every version the store issues (§10.1).
const nodeID = "StateStore"

// Store-level failures; the executor maps them to the exact §8 texts.
var (
	errFenceRequired = errors.New("a fencing token is required")
	errFenceLower    = errors.New("fencing token lower than the stored one")
	errQuota         = errors.New("key quota exceeded")
)

// Notification is one change delivered to one observer (§13.2).
type Notification struct {
	Key     []byte
	Op      string // resp.OpSet or resp.OpDelete
	Value   []byte // new value of a SET; nil for DELETE
	Version hlc.HLC
	Pos     uint64 // journal position to be durable before it is sent (0: none)
	Src     string // the writer's client id, sent as __srcId ("" for an expiry)
}

// Payload is the byte-exact NOTIFY body (§13.3).
func (n Notification) Payload() []byte {
	if n.Op == resp.OpDelete {
		return resp.AppendNotifyDelete(nil)
	}
	return resp.AppendNotifySet(make([]byte, 0, len(n.Value)+48), n.Value)
}

// Observer is the owner of KEYNOTIFY registrations: one MQTT connection.
// notify is called with the store lock held, in change order, and must not
// block.
type Observer interface {
	ClientID() string
	Notify(n Notification)
}

type entry struct {
	key     string
	value   []byte
	version hlc.HLC
	fence   hlc.HLC
	fenced  bool
	expires time.Time // zero: no expiry
	index   int       // position in the expiry heap, -1 when not in it
	// writer is the client id of the last SET, for the broker's console
	// ("" when unknown: recovered from the data directory, or seeded). It
	// shares the connection's id string, so it costs its header only.
	writer string
}

// Store is safe for concurrent use. One mutex serialises every operation,
// which makes each key (indeed the whole Store) linearizable.
type Store struct {
	now   func() time.Time
	clock *hlc.Clock
	quota Quota
	wake  chan struct{}
	j     *journal // nil: in memory only

	// clockFloor (unix ms) is the lowest wall time the clock reads: the
	// high-water mark recovered from the data directory, so that versions
	// keep increasing across a restart even if the wall clock stepped back.
	clockFloor atomic.Int64

	// scanKey keys the MACs of SCAN's tokens (scan.go).
	scanKey []byte

	mu       sync.Mutex
	entries  map[string]*entry
	index    *keyIndex // the keys of entries, in order (scan.go)
	bytes    int64     // sum of entry sizes (see entrySize)
	expiry   expiryHeap
	watchers map[string]map[string]Observer // key -> client id -> owner
	owned    map[Observer]map[string]struct{}
	regs     registrations // what the registrations hold (registrations.go)
}

// Quota bounds the store; a SET that would pass either bound fails with
// "the Quota has been exceeded" (§12.3).
type Quota struct {
	Keys  int   // stored keys; < 0 = unlimited
	Bytes int64 // sum of entry sizes; < 0 = unlimited
}

// entryOverhead is what one key costs besides its key and value bytes (the
// entry, its map slot, its heap slot): counted so a flood of empty keys
// meets the byte quota too.
const entryOverhead = 128

func entrySize(key string, value []byte) int64 {
	return int64(len(key) + len(value) + entryOverhead)
}

func New(now func() time.Time, q Quota) *Store {
	s := &Store{
		now:      now,
		quota:    q,
		wake:     make(chan struct{}, 1),
		entries:  make(map[string]*entry),
		index:    newKeyIndex(),
		scanKey:  newScanKey(),
		watchers: make(map[string]map[string]Observer),
		owned:    make(map[Observer]map[string]struct{}),
		regs:     registrations{byClient: map[string]*regUsage{}},
	}
	s.clock = hlc.NewClock(nodeID, s.clockNow)
	return s
}

// Now is the store's wall clock (Config.Now of the broker; a virtual
// clock in process).
func (s *Store) Now() time.Time { return s.now() }

// clockNow is the clock's wall time: now, but never below clockFloor.
func (s *Store) clockNow() time.Time {
	t := s.now()
	if f := s.clockFloor.Load(); t.UnixMilli() < f {
		return time.UnixMilli(f)
	}
	return t
}

// condition of a SET (§6).
type condition uint8

const (
	always condition = iota
	ifAbsent
	ifAbsentOrEqual
)

// setArgs is a validated SET.
type setArgs struct {
	key   []byte
	value []byte
	cond  condition
	px    time.Duration // 0: no expiry
	ts    hlc.HLC       // request __ts, already checked for skew
	ft    *hlc.HLC      // request __ft, already checked for skew
	src   string        // the writer's client id, named in notifications
}

// set applies a SET. It reports whether the SET was applied and the version
// to return: the new version, or the stored one when not applied.
func (s *Store) set(a setArgs) (applied bool, version hlc.HLC, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.lookup(a.key, now)
	if e != nil {
		if err := checkFence(e, a.ft); err != nil {
			return false, hlc.HLC{}, err
		}
	}
	switch {
	case e != nil && a.cond == ifAbsent,
		e != nil && a.cond == ifAbsentOrEqual && !bytes.Equal(e.value, a.value):
		_ = s.clock.Observe(a.ts)
		return false, e.version, nil
	}
	if err := s.checkQuota(e, a.key, a.value, now); err != nil {
		return false, hlc.HLC{}, err
	}
	v, err := s.clock.Recv(a.ts) // a.ts passed Parse and the skew check: only a defence
	if err != nil {
		return false, hlc.HLC{}, err
	}
	var key string
	var fence hlc.HLC
	fenced := false
	if e != nil {
		key, fence, fenced = e.key, e.fence, e.fenced
	} else {
		key = string(a.key)
	}
	if a.ft != nil && (!fenced || a.ft.Compare(fence) > 0) {
		fence, fenced = *a.ft, true
		fence.Node = strings.Clone(fence.Node) // it may alias the request packet
	}
	var expires time.Time
	if a.px > 0 {
		expires = now.Add(a.px)
	}
	pos, err := s.journalSet(key, a.value, v, expires, fence, fenced)
	if err != nil {
		return false, hlc.HLC{}, err
	}
	if e == nil {
		e = &entry{key: key, index: -1}
		s.entries[e.key] = e
		s.index.ReplaceOrInsert(e.key)
	} else {
		s.bytes -= entrySize(e.key, e.value)
		if e.index >= 0 {
			heap.Remove(&s.expiry, e.index)
		}
	}
	s.bytes += entrySize(e.key, a.value)
	e.value = bytes.Clone(a.value)
	if e.value == nil {
		e.value = []byte{}
	}
	e.version = v
	e.fence, e.fenced = fence, fenced
	e.expires = expires
	e.writer = a.src
	if a.px > 0 {
		heap.Push(&s.expiry, e)
		if e.index == 0 {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	s.notifyLocked(e.key, resp.OpSet, e.value, v, pos, a.src)
	return true, v, nil
}

// checkQuota refuses a SET that would create a key beyond the key quota, or
// grow the store beyond the byte quota (e is the live entry, nil when the
// SET creates the key); KEYNOTIFY registrations count with the keys
// (registrations.go). Expired entries are reaped first if that helps.
func (s *Store) checkQuota(e *entry, key, value []byte, now time.Time) error {
	newKey := e == nil
	grow := entrySize(string(key), value)
	if e != nil {
		grow -= entrySize(e.key, e.value)
	}
	over := func() bool {
		return (newKey && s.quota.Keys >= 0 && len(s.entries)+s.regs.count >= s.quota.Keys) ||
			(grow > 0 && s.quota.Bytes >= 0 && s.bytes+s.regs.bytes+grow > s.quota.Bytes)
	}
	if !over() {
		return nil
	}
	s.reapDue(now)
	if over() {
		return errQuota
	}
	return nil
}

// get returns the value and version of key, ok=false when absent.
func (s *Store) get(key []byte) (value []byte, version hlc.HLC, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key, s.now())
	if e == nil {
		return nil, hlc.HLC{}, false
	}
	return e.value, e.version, true
}

// del removes key (DEL, or VDEL when match is non-nil). It returns 1 when
// removed (version = the removed entry's), 0 when absent and -1 when match
// differs from the stored value (version = the stored one). src is the
// writer's client id, named in the notifications.
func (s *Store) del(key []byte, match []byte, ft *hlc.HLC, src string) (n int64, version hlc.HLC, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key, s.now())
	if e == nil {
		return 0, hlc.HLC{}, nil
	}
	if err := checkFence(e, ft); err != nil {
		return 0, hlc.HLC{}, err
	}
	if match != nil && !bytes.Equal(match, e.value) {
		return -1, e.version, nil
	}
	if err := s.removeLocked(e, src); err != nil {
		return 0, hlc.HLC{}, err
	}
	return 1, e.version, nil
}

// checkFence applies §11 to a present entry.
func checkFence(e *entry, ft *hlc.HLC) error {
	if !e.fenced {
		return nil
	}
	if ft == nil {
		return errFenceRequired
	}
	if ft.Compare(e.fence) < 0 {
		return errFenceLower
	}
	return nil
}

// lookup returns the live entry for key. An expired entry is removed here
// (with its single DELETE notification) and reported absent.
func (s *Store) lookup(key []byte, now time.Time) *entry {
	e := s.entries[string(key)]
	if e == nil {
		return nil
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		_ = s.removeLocked(e, "") // a journal failure is the journal's to report
		return nil
	}
	return e
}

// Writer returns the client id that last wrote key ("" when unknown:
// recovered from the data directory or seeded) and the version it wrote;
// found is false when key is not stored. It only reads (an expired key is
// left to the expiry loop).
func (s *Store) Writer(key []byte) (client string, version hlc.HLC, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live(string(key), s.now()) {
		return "", hlc.HLC{}, false
	}
	e := s.entries[string(key)]
	return e.writer, e.version, true
}

// removeLocked journals the deletion of e, deletes it and notifies its
// observers with a fresh tick, naming src (the deleting client; "" for an
// expiry). If the journal fails, e is deleted from memory all the same (an
// expiry cannot be refused) and the error returned; its notifications are
// then never sent.
func (s *Store) removeLocked(e *entry, src string) error {
	v := s.clock.Tick()
	pos, err := s.journalDelete(e.key, v)
	delete(s.entries, e.key)
	s.index.Delete(e.key)
	s.bytes -= entrySize(e.key, e.value)
	if e.index >= 0 {
		heap.Remove(&s.expiry, e.index)
	}
	s.notifyLocked(e.key, resp.OpDelete, nil, v, pos, src)
	return err
}

func (s *Store) notifyLocked(key, op string, value []byte, v hlc.HLC, pos uint64, src string) {
	w := s.watchers[key]
	if len(w) == 0 {
		return
	}
	n := Notification{Key: []byte(key), Op: op, Value: value, Version: v, Pos: pos, Src: src}
	for _, o := range w {
		o.Notify(n)
	}
}

// reapDue removes every entry whose deadline has passed and returns how long
// until the next deadline (ok=false when nothing expires).
func (s *Store) reapDue(now time.Time) (next time.Duration, ok bool) {
	for len(s.expiry) > 0 {
		e := s.expiry[0]
		if now.Before(e.expires) {
			return e.expires.Sub(now), true
		}
		_ = s.removeLocked(e, "") // a journal failure is the journal's to report
	}
	return 0, false
}

// Run is the active-expiry loop (§12.1): a timer on the earliest deadline,
// re-armed whenever a SET creates an earlier one. It returns when ctx ends.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		next, ok := s.reapDue(s.now())
		s.mu.Unlock()
		if ok {
			t.Reset(max(next, time.Millisecond))
		} else {
			t.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// Stats reports the number of stored keys and their size (expired ones not
// yet reaped included) and registrations.
func (s *Store) Stats() (keys int, bytes int64, registrations int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watchers {
		registrations += len(w)
	}
	return len(s.entries), s.bytes, registrations
}

// maxPX caps PX so that now+PX cannot overflow time.Duration (~292 years).
const maxPX = math.MaxInt64 / int64(time.Millisecond)

// expiryHeap is a min-heap of entries by deadline.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
