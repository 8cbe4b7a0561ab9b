package testrun

import "fmt"

// otherHolder is the lock value of the other host of fence steps.
const otherHolder = "another-host:fence"

// fence gives the lock name to another host behind its holder's back, as
// when the holder paused past its lease's expiry and a standby took over:
// the store issues the other host a newer fencing token, so the holder's
// next write fenced with the lock is refused with FENCED. The holder is
// not told (no LOCK_LOST event), and locking again finds the lock BUSY,
// held by "another host" until the case ends.
func (w *world) fence(name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.locks[name]; !ok || r == w.other {
		return fmt.Errorf("lock %q is not held by any rule", name)
	}
	w.locks[name] = w.other
	w.put(name, []byte(otherHolder), 0, nil, 0) // its lock request: a newer version, the newer token
	w.newest[name] = w.seq
	return nil
}
