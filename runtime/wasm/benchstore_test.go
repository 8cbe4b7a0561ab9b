package wasm

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// benchHost is the Host of the verb benchmarks: abitest.Host with Log
// dropped (abitest keeps every line, which would grow without bound over
// millions of calls) and the store verbs (Get, Set, Del, VDel) and the
// timer verbs (Timer, Cancel) on lean maps of their own. abitest records
// every call's arguments (a copy of the value, a map write of the whole
// Call) and makes each version with fmt.Sprintf, which made the host's
// share of a set (raw-set) about 3.6 floors, much of it the test double's
// bookkeeping. The lean store copies what a store must (the value or
// payload it keeps), reads the clock for a timer's deadline as the host
// does, and fails as abitest does, with the same messages (abi.Errorf, as
// the real binding).
type benchHost struct {
	*abitest.Host
	store *benchStore
}

func newBenchHost() benchHost {
	return benchHost{abitest.New(), &benchStore{data: map[string]*benchEntry{}, timers: map[string]*benchTimer{}}}
}

func (benchHost) Log(int32, string) {}

// benchStore is benchHost's store.
type benchStore struct {
	mu      sync.Mutex
	data    map[string]*benchEntry
	timers  map[string]*benchTimer
	version int64
	buf     []byte // scratch for versions
}

// benchTimer is an armed timer, kept as a host keeps it (nothing fires it
// here: the benchmarks time the arming).
type benchTimer struct {
	deadline int64 // Unix ms
	every    time.Duration
	payload  []byte
}

type benchEntry struct {
	value   []byte
	version string
}

// Put stores value under key.
func (h benchHost) Put(key string, value []byte) string {
	v, _ := h.Set(context.Background(), key, value, abi.SetOptions{})
	return v
}

// Get implements abi.Host.
func (h benchHost) Get(_ context.Context, key string) (abi.Value, error) {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !ok {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: e.value, Version: e.version}, nil // the runtime copies them into the guest
}

// Set implements abi.Host: no conditions, TTLs or fences (the bench rows
// use none).
func (h benchHost) Set(_ context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	if opts != (abi.SetOptions{}) {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: the bench store takes no options", key)
	}
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	s.buf = append(strconv.AppendInt(s.buf[:0], s.version, 10), ":0:bench"...)
	e := s.data[key]
	if e == nil { // one lookup for a key written before, as a store's
		e = &benchEntry{}
		s.data[key] = e
	}
	// A new array each time: Get hands out the old one, which the runtime
	// copies into the guest after the lock is released.
	e.value = append(e.value[:0:0], value...)
	e.version = string(s.buf)
	return e.version, nil
}

// Del implements abi.Host.
func (h benchHost) Del(_ context.Context, key string, _ abi.DelOptions) error {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[key]; !ok {
		return abi.Errorf(abi.StatusNotFound, "del %q: not found", key)
	}
	delete(s.data, key)
	return nil
}

// VDel implements abi.Host.
func (h benchHost) VDel(_ context.Context, key string, value []byte, _ abi.DelOptions) error {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !ok {
		return abi.Errorf(abi.StatusNotFound, "vdel %q: not found", key)
	}
	if !bytes.Equal(e.value, value) {
		return abi.Errorf(abi.StatusNotApplied, "vdel %q: value differs", key)
	}
	delete(s.data, key)
	return nil
}

// Timer implements abi.Host. The payload is lent (abi.Host): it is copied
// into the timer's own array, which no one else holds.
func (h benchHost) Timer(_ context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	if delay < 0 || opts.Every < 0 {
		return abi.Errorf(abi.StatusInvalid, "timer %q: negative delay or period", name)
	}
	deadline := time.Now().Add(delay).UnixMilli()
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.timers[name]
	if t == nil {
		t = &benchTimer{}
		s.timers[name] = t
	}
	t.deadline, t.every, t.payload = deadline, opts.Every, append(t.payload[:0], opts.Payload...)
	return nil
}

// Cancel implements abi.Host.
func (h benchHost) Cancel(_ context.Context, name string) error {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.timers[name]; !ok {
		return abi.Errorf(abi.StatusNotFound, "cancel %q: no such timer", name)
	}
	delete(s.timers, name)
	return nil
}
