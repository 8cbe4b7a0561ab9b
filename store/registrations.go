package store

// This file holds the store's KEYNOTIFY registrations (statestore-protocol.md
// §13.1) and what they cost. A registration keeps its key, which a client
// chooses (up to a packet's size), for as long as its connection lives:
// without a bound, 80 registrations of 3.9 MB keys held 460 MB while the
// store held no key. So registrations count against the store's quotas as
// keys do: each costs its key's length plus entryOverhead against
// Config.MaxBytes, and one against Config.Quota, with the stored keys;
// and one client id may hold at most an eighth of either. Past a bound
// KEYNOTIFY fails with the store's quota error (E5), as a SET does.

// regShare is the part of each quota one client id's registrations may
// hold: 1/regShare.
const regShare = 8

// registrations is what the registrations hold, in all and per client id.
type registrations struct {
	count    int
	bytes    int64
	byClient map[string]*regUsage
}

type regUsage struct {
	count int
	bytes int64
}

func regSize(key string) int64 { return int64(len(key)) + entryOverhead }

// admitLocked reports whether client may add a registration of key
// (s.mu held): the key and byte quotas hold for the store's keys and
// registrations together, and for client's own registrations within their
// share.
func (s *Store) admitLocked(client string, key []byte) bool {
	size := int64(len(key)) + entryOverhead
	u := s.regs.byClient[client]
	if u == nil {
		u = &regUsage{}
	}
	if q := s.quota.Keys; q >= 0 && (len(s.entries)+s.regs.count+1 > q || u.count+1 > max(q/regShare, 1)) {
		return false
	}
	if q := s.quota.Bytes; q >= 0 && (s.bytes+s.regs.bytes+size > q || u.bytes+size > max(q/regShare, size)) {
		return false
	}
	return true
}

func (s *Store) countLocked(client, key string, n int) {
	u := s.regs.byClient[client]
	if u == nil {
		u = &regUsage{}
		s.regs.byClient[client] = u
	}
	size := regSize(key) * int64(n)
	u.count += n
	u.bytes += size
	s.regs.count += n
	s.regs.bytes += size
	if u.count == 0 {
		delete(s.regs.byClient, client)
	}
}

// keyNotify registers (o.clientID(), key); a registration by another
// connection with the same client id is taken over. It fails with errQuota
// past the registrations' bounds.
func (s *Store) keyNotify(o Observer, key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := o.ClientID()
	w := s.watchers[string(key)]
	prev, exists := w[id]
	if !exists && !s.admitLocked(id, key) {
		s.reapDue(s.now()) // expired keys may make room
		if !s.admitLocked(id, key) {
			return errQuota
		}
	}
	k := string(key)
	if w == nil {
		w = make(map[string]Observer)
		s.watchers[k] = w
	}
	if !exists {
		s.countLocked(id, k, 1)
	}
	if prev != nil && prev != o {
		delete(s.owned[prev], k)
	}
	w[id] = o
	keys := s.owned[o]
	if keys == nil {
		keys = make(map[string]struct{})
		s.owned[o] = keys
	}
	keys[k] = struct{}{}
	return nil
}

// keyNotifyStop removes the registration (clientID, key) and reports whether
// it existed.
func (s *Store) keyNotifyStop(clientID string, key []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := string(key)
	o := s.watchers[k][clientID]
	if o == nil {
		return false
	}
	s.unwatchLocked(k, clientID)
	delete(s.owned[o], k)
	if len(s.owned[o]) == 0 {
		delete(s.owned, o)
	}
	return true
}

func (s *Store) unwatchLocked(key, clientID string) {
	w := s.watchers[key]
	if _, ok := w[clientID]; !ok {
		return
	}
	delete(w, clientID)
	s.countLocked(clientID, key, -1)
	if len(w) == 0 {
		delete(s.watchers, key)
	}
}

// DropObserver removes every registration owned by o (its connection
// closed, §13.1). Registrations of the same client id made by a newer
// connection are untouched. No notify call reaches o after it returns.
func (s *Store) DropObserver(o Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.owned[o] {
		if s.watchers[k][o.ClientID()] == o {
			s.unwatchLocked(k, o.ClientID())
		}
	}
	delete(s.owned, o)
}

// RegistrationsOf returns how many KEYNOTIFY registrations client holds.
func (s *Store) RegistrationsOf(client string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.regs.byClient[client]; u != nil {
		return u.count
	}
	return 0
}
