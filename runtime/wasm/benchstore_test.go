package wasm

import (
	"context"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// benchHost is the Host of the verb benchmarks: abitest.Host with Log
// dropped (abitest keeps every line, which would grow without bound over
// millions of calls), the store verbs (Get, Set, Del, VDel) made on its
// store without its bookkeeping (abitest.Host.Store: the state store's own
// code, package store, in memory, called with RESP3 requests as a client
// calls it), and the timer verbs (Timer, Cancel) on a lean map of their
// own. abitest records every call's arguments (a copy of the value, a map
// write of the whole Call), which made the host's share of a verb largely
// the test double's bookkeeping. The lean timers copy what a host must
// (the payload it keeps), read the clock for a timer's deadline as the
// host does, and fail as abitest does, with the same messages.
type benchHost struct {
	*abitest.Host
	timers *benchTimers
}

func newBenchHost() benchHost {
	return benchHost{abitest.New(), &benchTimers{m: map[string]*benchTimer{}}}
}

func (benchHost) Log(int32, string) {}

// benchTimers are benchHost's timers.
type benchTimers struct {
	mu sync.Mutex
	m  map[string]*benchTimer
}

// benchTimer is an armed timer, kept as a host keeps it (nothing fires it
// here: the benchmarks time the arming).
type benchTimer struct {
	deadline int64 // Unix ms
	every    time.Duration
	payload  []byte
}

// Get implements abi.Host.
func (h benchHost) Get(ctx context.Context, key string) (abi.Value, error) {
	return h.Store().Get(ctx, key)
}

// Set implements abi.Host.
func (h benchHost) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	return h.Store().Set(ctx, key, value, opts)
}

// Del implements abi.Host.
func (h benchHost) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	return h.Store().Del(ctx, key, opts)
}

// VDel implements abi.Host.
func (h benchHost) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	return h.Store().VDel(ctx, key, value, opts)
}

// Timer implements abi.Host. The payload is lent (abi.Host): it is copied
// into the timer's own array, which no one else holds.
func (h benchHost) Timer(_ context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	if delay < 0 || opts.Every < 0 {
		return abi.Errorf(abi.StatusInvalid, "timer %q: negative delay or period", name)
	}
	deadline := time.Now().Add(delay).UnixMilli()
	s := h.timers
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.m[name]
	if t == nil {
		t = &benchTimer{}
		s.m[name] = t
	}
	t.deadline, t.every, t.payload = deadline, opts.Every, append(t.payload[:0], opts.Payload...)
	return nil
}

// Cancel implements abi.Host.
func (h benchHost) Cancel(_ context.Context, name string) error {
	s := h.timers
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[name]; !ok {
		return abi.Errorf(abi.StatusNotFound, "cancel %q: no such timer", name)
	}
	delete(s.m, name)
	return nil
}
