package store

import "time"

// Expire removes the keys whose expiry is due at the store's Now, with
// their DELETE notifications, as Run does on its timer, and returns when
// the next key expires (ok false: none will). A store on a virtual clock
// (ssrun test and replay) has no Run: whoever moves the clock calls it.
func (s *Store) Expire() (next time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	d, ok := s.reapDue(now)
	return now.Add(d), ok
}
