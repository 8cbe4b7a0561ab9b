package abitest

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
	"github.com/ssrun/ssrun/store"
)

// epochMs is the time of a Store's clock, which stands still: the wall time
// of every version (Version).
const epochMs = 1_700_000_000_000

// holder is the value of a lock's key: the rule holding it.
const holder = "abitest"

// ts is the __ts of every SET: the store's clock, which the store's
// versions follow (store.Store's Recv rule), one counter step at a time.
var ts = hlc.HLC{Wall: epochMs, Node: holder}.String()

// Version returns the n-th version (or lock token) the store of a Host
// issues after New or Reset, counting from 1: each set, lock and Put takes
// one, and so does each key deleted (a delete's version, which only
// notifications carry).
func Version(n int) string {
	return hlc.HLC{Wall: epochMs, Counter: uint64(n), Node: "StateStore"}.String()
}

// Store is the store verbs of an abi.Host (Get, Set, Del, VDel, Lock and
// Unlock) on the state store's own semantics: a store.Store in memory,
// called as a client would call it (RESP3 requests to store.Execute), on a
// clock that stands still (keys with a ttl do not expire; versions are
// Version(n)). Locks are keys set NX to "abitest" whose version is the
// token; a write fenced with a held lock carries its token, so a key
// written fenced refuses a write without one (FENCED), as in the store.
// A Host keeps its keys in one; a benchmark of a runtime may call one
// without the Host's bookkeeping (Host.Store). It is safe for concurrent
// use.
type Store struct {
	mu    sync.Mutex
	eng   *store.Store
	locks map[string]string // lock name -> token held
	buf   []byte            // the request being built
}

// NewStore returns an empty Store.
func NewStore() *Store {
	s := &Store{}
	s.reset()
	return s
}

func (s *Store) reset() {
	s.eng = store.New(func() time.Time { return time.UnixMilli(epochMs) }, store.Quota{Keys: -1, Bytes: -1})
	s.locks = map[string]string{}
}

// exec runs a request of args with the __ts ts (a SET needs one; the other
// commands would only fold it into the store's clock: nil) and the __ft ft
// ("" for none), and returns its decoded reply and the version sent with
// it ("" for none). s.mu is held.
func (s *Store) exec(ts *string, ft string, args ...[]byte) (resp.Reply, string, error) {
	s.buf = resp.AppendRequest(s.buf[:0], args...)
	req := store.Request{Payload: s.buf, TS: ts, ClientID: holder}
	if ft != "" {
		req.FT = &ft
	}
	r := s.eng.Execute(req)
	rep, err := resp.ParseReply(r.Payload)
	if err != nil { // not reached: the store always replies in RESP3
		return resp.Reply{}, "", abi.Errorf(abi.StatusInternal, "the store's reply: %v", err)
	}
	version := ""
	if r.HasVersion {
		version = r.Version.String()
	}
	return rep, version, nil
}

// refused is the error of a reply that is not one the verb expects: the
// store's error text (FENCED for a fencing token missing or too low), or
// the reply unexpected.
func refused(verb, key string, rep resp.Reply) error {
	if rep.Kind != resp.KindError {
		return abi.Errorf(abi.StatusInternal, "%s %q: unexpected reply %s", verb, key, rep.Kind)
	}
	switch text := string(rep.Str); text {
	case wire.ErrTextMissingFencingToken, wire.ErrTextFencingTokenLower:
		return abi.Errorf(abi.StatusFenced, "%s %q: %s", verb, key, text)
	default:
		return abi.Errorf(abi.StatusStoreError, "%s %q: %s", verb, key, text)
	}
}

// fence returns the token of the lock name ("" for none), which must be
// held. s.mu is held.
func (s *Store) fence(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	tok, ok := s.locks[name]
	if !ok {
		return "", abi.Errorf(abi.StatusLockLost, "fence %q: lock not held", name)
	}
	return tok, nil
}

// Get implements abi.Host's Get.
func (s *Store) Get(_ context.Context, key string) (abi.Value, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep, version, err := s.exec(nil, "", bGet, []byte(key))
	switch {
	case err != nil:
		return abi.Value{}, err
	case rep.Kind == resp.KindBulk:
		return abi.Value{Data: rep.Str, Version: version}, nil // a reply of its own: the caller may keep it
	case rep.Kind == resp.KindNil:
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{}, refused("get", key, rep)
}

// Set implements abi.Host's Set: NX, NEX, a ttl (PX, in ms rounded up) and
// a fence as the binding sends them.
func (s *Store) Set(_ context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	if opts.Cond > abi.CondNEX || opts.TTL < 0 {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: bad options", key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ft, err := s.fence(opts.Fence)
	if err != nil {
		return "", err
	}
	return s.set(key, value, opts.Cond, opts.TTL, ft)
}

// set makes a SET. s.mu is held.
func (s *Store) set(key string, value []byte, cond abi.Condition, ttl time.Duration, ft string) (string, error) {
	var a [6][]byte
	var px [20]byte
	args := append(a[:0], bSet, []byte(key), value)
	if value == nil {
		args[2] = []byte{}
	}
	switch cond {
	case abi.CondNX:
		args = append(args, bNX)
	case abi.CondNEX:
		args = append(args, bNEX)
	}
	if ttl > 0 {
		args = append(args, bPX, strconv.AppendInt(px[:0], max(ttl.Milliseconds(), 1), 10))
	}
	rep, version, err := s.exec(&ts, ft, args...)
	switch {
	case err != nil:
		return "", err
	case rep.Kind == resp.KindSimple:
		return version, nil
	case rep.Kind == resp.KindInteger && rep.Int == -1:
		return version, abi.Errorf(abi.StatusNotApplied, "set %q: not applied", key)
	}
	return "", refused("set", key, rep)
}

// Del implements abi.Host's Del.
func (s *Store) Del(_ context.Context, key string, opts abi.DelOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.del("del", key, nil, opts.Fence)
}

// VDel implements abi.Host's VDel.
func (s *Store) VDel(_ context.Context, key string, value []byte, opts abi.DelOptions) error {
	if value == nil {
		value = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.del("vdel", key, value, opts.Fence)
}

// del makes a DEL, or a VDEL of match when it is not nil. s.mu is held.
func (s *Store) del(verb, key string, match []byte, fence string) error {
	ft, err := s.fence(fence)
	if err != nil {
		return err
	}
	args := [][]byte{bDel, []byte(key)}
	if match != nil {
		args = [][]byte{bVDel, []byte(key), match}
	}
	rep, _, err := s.exec(nil, ft, args...)
	switch {
	case err != nil:
		return err
	case rep.Kind != resp.KindInteger:
		return refused(verb, key, rep)
	case rep.Int == 1:
		return nil
	case rep.Int == 0:
		return abi.Errorf(abi.StatusNotFound, "%s %q: not found", verb, key)
	}
	return abi.Errorf(abi.StatusNotApplied, "%s %q: value differs", verb, key)
}

// Lock implements abi.Host's Lock, without waiting: a lock this Store holds
// returns its token; otherwise its key is set NX to "abitest" with the
// ttl, and a key already there (another holder's) is BUSY.
func (s *Store) Lock(_ context.Context, name string, ttl time.Duration, _ abi.LockOptions) (string, error) {
	if ttl <= 0 {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be positive", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok, ok := s.locks[name]; ok {
		return tok, nil
	}
	tok, err := s.set(name, []byte(holder), abi.CondNX, ttl, "")
	if abi.StatusOf(err) == abi.StatusNotApplied {
		return "", abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", name)
	}
	if err != nil {
		return "", err
	}
	s.locks[name] = tok
	return tok, nil
}

// Unlock implements abi.Host's Unlock: the lock is released and its key
// deleted if it still holds "abitest".
func (s *Store) Unlock(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.locks[name]; !ok {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held", name)
	}
	delete(s.locks, name)
	err := s.del("unlock", name, []byte(holder), "")
	if st := abi.StatusOf(err); st == abi.StatusNotFound || st == abi.StatusNotApplied {
		return nil // gone, or another writer's since: not this Store's to delete
	}
	return err
}

// LoseLock drops a held lock as if its lease lapsed; its key stays.
func (s *Store) LoseLock(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locks, name)
}

// Put stores key as another writer would (without a fence) and returns
// its version; a key written fenced refuses it, and Put returns "".
func (s *Store) Put(key string, value []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.set(key, value, abi.CondNone, 0, "")
	if err != nil {
		return ""
	}
	return v
}

// Value returns the stored value of key.
func (s *Store) Value(key string) ([]byte, bool) {
	v, err := s.Get(context.Background(), key)
	return v.Data, err == nil
}

// The commands, as the store client spells them.
var (
	bGet  = []byte("GET")
	bSet  = []byte("SET")
	bDel  = []byte("DEL")
	bVDel = []byte("VDEL")
	bNX   = []byte("NX")
	bNEX  = []byte("NEX")
	bPX   = []byte("PX")
)
