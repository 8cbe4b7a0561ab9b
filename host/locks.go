package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// lease is a lock held by a rule: the store key name holds holder with a PX
// expiry that a renewal goroutine extends every ttl/3. Its token is the lock
// key's version, which grows with each renewal (statestore-protocol.md §14).
type lease struct {
	name   string
	holder string
	ttl    time.Duration
	stop   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	token hlc.HLC
	lost  bool
}

func (l *lease) current() (hlc.HLC, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token, l.lost
}

// holder is the lock value for this rule: "<client id>:<rule file name>", so
// two rules of one host, and the same rule on two hosts, are distinct holders.
func (r *rule) holder() string { return r.h.client.ClientID() + ":" + r.name }

// lock acquires (or returns) the lease name; see abi.Host.Lock.
func (r *rule) lock(ctx context.Context, name string, ttl, wait time.Duration) (string, error) {
	if ttl < time.Millisecond {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be at least 1 ms", name)
	}
	if wait < 0 {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: wait must not be negative", name)
	}
	r.mu.Lock()
	if l := r.locks[name]; l != nil {
		if tok, lost := l.current(); !lost {
			r.mu.Unlock()
			return tok.String(), nil
		}
	}
	r.mu.Unlock()

	var wake <-chan struct{}
	if wait > 0 {
		ch, release, err := r.h.reg.waitDelete(ctx, name)
		if err != nil {
			return "", storeError(err)
		}
		defer release()
		wake = ch
	}
	deadline := time.Now().Add(wait)
	holder := r.holder()
	for {
		sent := time.Now()
		res, err := r.h.client.Set(ctx, []byte(name), []byte(holder), protocol.SetOptions{Condition: protocol.CondNEX, Expiry: ttl})
		if err != nil {
			return "", storeError(err)
		}
		if res.Applied {
			return r.hold(name, holder, ttl, res.Version, sent), nil
		}
		remaining := time.Until(deadline)
		if wait == 0 || remaining <= 0 {
			return "", abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", name)
		}
		// Wait for the holder to let go: a DELETE notification, or a
		// periodic retry in case one was missed.
		t := time.NewTimer(min(remaining, time.Second))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", abi.Errorf(abi.StatusTimeout, "lock %q: gave up waiting: %v", name, ctx.Err())
		}
		t.Stop()
	}
}

// hold records an acquired lease and starts its renewal.
func (r *rule) hold(name, holder string, ttl time.Duration, token hlc.HLC, sent time.Time) string {
	l := &lease{name: name, holder: holder, ttl: ttl, token: token, stop: make(chan struct{}), done: make(chan struct{})}
	r.mu.Lock()
	old := r.locks[name]
	r.locks[name] = l
	r.mu.Unlock()
	if old != nil {
		old.halt()
	}
	r.wg.Add(1)
	go r.renew(l, sent.Add(ttl))
	return token.String()
}

func (l *lease) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// renew extends the lease every ttl/3 until it is released or lost. A renewal
// that finds another holder, or failures that outlast the lease, lose it: the
// rule gets a LOCK_LOST event and its fenced writes fail locally.
func (r *rule) renew(l *lease, expires time.Time) {
	defer r.wg.Done()
	defer close(l.done)
	interval := max(l.ttl/3, time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(r.h.ctx, interval)
		res, err := r.h.client.Set(ctx, []byte(l.name), []byte(l.holder), protocol.SetOptions{Condition: protocol.CondNEX, Expiry: l.ttl})
		cancel()
		switch {
		case err == nil && res.Applied:
			l.mu.Lock()
			l.token = res.Version
			l.mu.Unlock()
			expires = sent.Add(l.ttl)
		case err == nil:
			r.loseLease(l, "taken by another holder")
			return
		case time.Now().After(expires):
			r.loseLease(l, "lease expired while renewals failed: "+err.Error())
			return
		default:
			if r.h.ctx.Err() != nil {
				return
			}
			r.h.log.Warn("lock renewal failed; retrying", "rule", r.name, "lock", l.name, "err", err)
		}
		t.Reset(interval)
	}
}

// loseLease marks the lease lost and queues a LOCK_LOST event for the rule,
// outside its mailbox so a full mailbox cannot swallow it.
func (r *rule) loseLease(l *lease, why string) {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	r.h.log.Warn("lock lost", "rule", r.name, "lock", l.name, "reason", why)
	r.mu.Lock()
	r.lost = append(r.lost, l.name)
	r.mu.Unlock()
	select {
	case r.lostSignal <- struct{}{}:
	default:
	}
}

// unlock releases the lease name; see abi.Host.Unlock.
func (r *rule) unlock(ctx context.Context, name string) error {
	r.mu.Lock()
	l := r.locks[name]
	delete(r.locks, name)
	r.mu.Unlock()
	if l == nil {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held by this rule", name)
	}
	if err := r.releaseLease(ctx, l); err != nil {
		return storeError(err)
	}
	return nil
}

// releaseLease stops renewal and deletes the lock key if it still holds this
// holder (VDEL: never another holder's lock).
func (r *rule) releaseLease(ctx context.Context, l *lease) error {
	l.halt()
	if _, lost := l.current(); lost {
		return nil
	}
	_, err := r.h.client.VDel(ctx, []byte(l.name), []byte(l.holder), protocol.DelOptions{})
	if err != nil && !errors.Is(err, protocol.ErrNotConnected) {
		return err
	}
	return nil
}

// fenceToken returns the token to attach to a write fenced with the lock
// name, or a LOCK_LOST error when the rule does not hold it (any more).
func (r *rule) fenceToken(verb, key, name string) (hlc.HLC, error) {
	if name == "" {
		return hlc.HLC{}, nil
	}
	r.mu.Lock()
	l := r.locks[name]
	r.mu.Unlock()
	if l == nil {
		return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %q: fenced with lock %q, which rule %s does not hold", verb, key, name, r.name)
	}
	tok, lost := l.current()
	if lost {
		return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %q: fenced with lock %q, which rule %s has lost", verb, key, name, r.name)
	}
	return tok, nil
}
