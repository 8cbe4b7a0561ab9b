// Package abitest provides an in-memory abi.Host for runtime tests and
// benchmarks: a faithful little store (versions, NX/NEX, VDEL, locks with
// tokens, fences) without a broker, so a runtime can be tested verb by verb.
package abitest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Host is an in-memory abi.Host. The zero value is not usable; call New.
type Host struct {
	mu      sync.Mutex
	data    map[string]entry
	version int64
	watches map[string]abi.WatchOptions
	locks   map[string]string // lock name -> token held by this rule
	logs    []LogLine
	calls   map[string]int
	// Deny, when set, refuses keys it returns true for with StatusDenied.
	Deny func(verb, key string) bool
}

type entry struct {
	value   []byte
	version string
}

// LogLine is one call of Log.
type LogLine struct {
	Level int32
	Msg   string
}

// New returns an empty Host.
func New() *Host {
	return &Host{data: map[string]entry{}, watches: map[string]abi.WatchOptions{}, locks: map[string]string{}, calls: map[string]int{}}
}

var _ abi.Host = (*Host)(nil)

func (h *Host) begin(verb, key string) error {
	h.calls[verb]++
	if key == "" && verb != abi.FnLog {
		return abi.Errorf(abi.StatusInvalid, "%s: empty key", verb)
	}
	if h.Deny != nil && h.Deny(verb, key) {
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted", verb, key)
	}
	return nil
}

func (h *Host) nextVersion() string {
	h.version++
	return fmt.Sprintf("%015d:%05d:abitest", h.version, 0)
}

func (h *Host) fence(name string) error {
	if name == "" {
		return nil
	}
	if _, ok := h.locks[name]; !ok {
		return abi.Errorf(abi.StatusLockLost, "fence %q: lock not held", name)
	}
	return nil
}

// Get implements abi.Host.
func (h *Host) Get(_ context.Context, key string) (abi.Value, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnGet, key); err != nil {
		return abi.Value{}, err
	}
	e, ok := h.data[key]
	if !ok {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: bytes.Clone(e.value), Version: e.version}, nil
}

// Set implements abi.Host.
func (h *Host) Set(_ context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnSet, key); err != nil {
		return "", err
	}
	if opts.Cond > abi.CondNEX || opts.TTL < 0 {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: bad options", key)
	}
	if err := h.fence(opts.Fence); err != nil {
		return "", err
	}
	e, exists := h.data[key]
	if exists && (opts.Cond == abi.CondNX || opts.Cond == abi.CondNEX && !bytes.Equal(e.value, value)) {
		return e.version, abi.Errorf(abi.StatusNotApplied, "set %q: not applied", key)
	}
	v := h.nextVersion()
	h.data[key] = entry{value: bytes.Clone(value), version: v}
	return v, nil
}

// Del implements abi.Host.
func (h *Host) Del(_ context.Context, key string, opts abi.DelOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnDel, key); err != nil {
		return err
	}
	if err := h.fence(opts.Fence); err != nil {
		return err
	}
	if _, ok := h.data[key]; !ok {
		return abi.Errorf(abi.StatusNotFound, "del %q: not found", key)
	}
	delete(h.data, key)
	return nil
}

// VDel implements abi.Host.
func (h *Host) VDel(_ context.Context, key string, value []byte, opts abi.DelOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnVDel, key); err != nil {
		return err
	}
	if err := h.fence(opts.Fence); err != nil {
		return err
	}
	e, ok := h.data[key]
	if !ok {
		return abi.Errorf(abi.StatusNotFound, "vdel %q: not found", key)
	}
	if !bytes.Equal(e.value, value) {
		return abi.Errorf(abi.StatusNotApplied, "vdel %q: value differs", key)
	}
	delete(h.data, key)
	return nil
}

// Watch implements abi.Host.
func (h *Host) Watch(_ context.Context, key string, opts abi.WatchOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnWatch, key); err != nil {
		return err
	}
	h.watches[key] = opts
	return nil
}

// Unwatch implements abi.Host.
func (h *Host) Unwatch(_ context.Context, key string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnUnwatch, key); err != nil {
		return err
	}
	if _, ok := h.watches[key]; !ok {
		return abi.Errorf(abi.StatusNotFound, "unwatch %q: not watched", key)
	}
	delete(h.watches, key)
	return nil
}

// Lock implements abi.Host. A lock is free unless this Host holds it, or a
// value is stored under its name by someone else (Set), which makes it BUSY.
func (h *Host) Lock(_ context.Context, name string, ttl time.Duration, _ abi.LockOptions) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnLock, name); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be positive", name)
	}
	if tok, ok := h.locks[name]; ok {
		return tok, nil
	}
	if _, taken := h.data[name]; taken {
		return "", abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", name)
	}
	tok := h.nextVersion()
	h.locks[name] = tok
	h.data[name] = entry{value: []byte("abitest"), version: tok}
	return tok, nil
}

// Unlock implements abi.Host.
func (h *Host) Unlock(_ context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(abi.FnUnlock, name); err != nil {
		return err
	}
	if _, ok := h.locks[name]; !ok {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held", name)
	}
	delete(h.locks, name)
	delete(h.data, name)
	return nil
}

// LoseLock drops a held lock as if its lease lapsed.
func (h *Host) LoseLock(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.locks, name)
}

// Log implements abi.Host.
func (h *Host) Log(level int32, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[abi.FnLog]++
	h.logs = append(h.logs, LogLine{Level: level, Msg: msg})
}

// Value returns the stored value of key.
func (h *Host) Value(key string) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.data[key]
	return bytes.Clone(e.value), ok
}

// Put stores key directly, as another writer would.
func (h *Host) Put(key string, value []byte) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.nextVersion()
	h.data[key] = entry{value: bytes.Clone(value), version: v}
	return v
}

// Watches returns the watched keys and their options.
func (h *Host) Watches() map[string]abi.WatchOptions {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]abi.WatchOptions, len(h.watches))
	for k, v := range h.watches {
		out[k] = v
	}
	return out
}

// Logs returns the log lines so far.
func (h *Host) Logs() []LogLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LogLine(nil), h.logs...)
}

// Calls returns how many times verb was called.
func (h *Host) Calls(verb string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[verb]
}
