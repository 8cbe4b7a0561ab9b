package ruletimers

import (
	"context"
	"maps"
	"sync"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// memStore is a Store in memory that remembers the fencing token of each
// write, and fails every call while fail is set.
type memStore struct {
	mu     sync.Mutex
	kv     map[string][]byte
	tokens []hlc.HLC // of each write, in order
	fail   error
}

func newMemStore() *memStore { return &memStore{kv: map[string][]byte{}} }

func (s *memStore) Get(_ context.Context, key []byte, _ protocol.CallOptions) (protocol.GetResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return protocol.GetResult{}, s.fail
	}
	v, ok := s.kv[string(key)]
	return protocol.GetResult{Value: v, Found: ok}, nil
}

func (s *memStore) Set(_ context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = append(s.tokens, opts.FencingToken)
	if s.fail != nil {
		return protocol.SetResult{}, s.fail
	}
	s.kv[string(key)] = append([]byte(nil), value...)
	return protocol.SetResult{Applied: true}, nil
}

func (s *memStore) Del(_ context.Context, key []byte, opts protocol.DelOptions) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = append(s.tokens, opts.FencingToken)
	if s.fail != nil {
		return 0, s.fail
	}
	_, ok := s.kv[string(key)]
	delete(s.kv, string(key))
	if ok {
		return 1, nil
	}
	return 0, nil
}

// snapshot returns the keys and values stored.
func (s *memStore) snapshot() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.kv)
}

// writes is how many writes were tried.
func (s *memStore) writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tokens)
}
