// Package lease is a rule's locks (lock, unlock, fenced writes): leases
// on store keys with fencing tokens, renewed until released or lost, a
// lost one announced to the rule once as its LOCK_LOST event, and the
// check of a fenced write's token against the lease clock. The host's
// group takes its member, roster and ownership leases with it too.
package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Lease timing: when a lease may have expired, and why a write that passes
// the check lands while the store still keeps the lease.
//
// A lease is taken or renewed by SET name holder NEX PX ttl. The store starts
// the ttl when it executes that request, which is after the host sent it: if
// the host reads its monotonic clock at s just before sending, and the
// request is applied, the store keeps the key for at least ttl after s. The
// host counts the lease as held only while now - s < ttl - Margin(ttl)
// on its own clock, s being the send time of the last applied lock or
// renewal request. After that the lease may have expired, and
//
//   - a fenced write (set/del/vdel with fence) fails locally with LOCK_LOST
//     and is never sent;
//   - a re-lock takes the lease again (a new request, a new token) instead
//     of returning the old token;
//   - the renewal goroutine stops instead of renewing, because NEX would
//     re-create a lapsed key and hide the gap during which another holder
//     may have held it;
//
// and in each case the lease is lost: the rule gets one LOCK_LOST event.
//
// Why that is safe: a fenced write checked at host time c, with c - s <
// ttl - margin, is executed by the store a send latency d after c. It lands
// inside the lease if (c - s) + d < ttl as the store's clock measures it. A
// store clock running faster than the host's by a rate ρ measures c - s as at
// most (c - s)(1 + ρ) < ttl - margin + ρ·ttl. So the write lands inside the
// lease whenever ρ·ttl + d ≤ margin: leaseDriftPPM of the ttl covers ρ, and
// leaseSendAllowance covers d (the host's path from the check to the socket,
// and the network to the store). Renewals are sent under the same check, so
// an applied renewal extends a lease that never lapsed in the store. The
// host's clock is monotonic, so steps of its wall clock do not matter.
//
// What no local check can cover: a delay between the check and the store
// executing the write longer than the allowance (the process paused right
// after the check, a request held up in the network or resent after a
// reconnect). Such a late write is the store's to refuse, which it does once
// the new holder has written the key with its larger token.
const (
	// leaseDriftPPM bounds how much faster, in parts per million, the
	// store's clock may run than the host's monotonic clock: quartz
	// oscillators are within ±100 ppm and NTP slews a clock by at most
	// 500 ppm, so 1000 covers both clocks with room to spare.
	leaseDriftPPM = 1000
	// leaseSendAllowance bounds the time from a fenced write's lease check to
	// the store executing it. A store round trip is well under 1 ms on a
	// LAN; 100 ms leaves room for a loaded host or a congested network. It
	// is capped at a quarter of the ttl so that short leases stay usable.
	leaseSendAllowance = 100 * time.Millisecond
)

// Margin is how long before sent + ttl the host stops counting a lease
// as held (see above): ttl/1000 for clock drift plus min(100 ms, ttl/4) for
// the send latency. For a 1 s ttl that is 101 ms; for 10 s, 110 ms. It stays
// under ttl/3, so a lease stays held for more than two renewal intervals
// (ttl/3 each) after its last applied request: one failed renewal is retried
// in time.
func Margin(ttl time.Duration) time.Duration {
	return ttl/1_000_000*leaseDriftPPM + min(leaseSendAllowance, ttl/4)
}

// Lease is a lock held by a rule: the store key Name holds Holder with a PX
// expiry that a renewal goroutine extends every TTL/3. Its token is the lock
// key's version, which grows with each renewal (statestore-protocol.md §14).
type Lease struct {
	// Name, Holder and TTL are set when the lease is taken, and never
	// changed.
	Name     string
	Holder   string
	TTL      time.Duration
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu    sync.Mutex
	token hlc.HLC
	// until is when the lease may have expired, on the host's lease clock:
	// the send time of the last applied lock or renewal request, plus ttl,
	// minus Margin(ttl).
	until time.Time
	lost  bool
}

// Held returns the token if, at now, the lease is held for certain. When it
// is not, why says so; lapsed reports that this call found the lease
// expired and marked it lost (the caller announces the loss).
func (l *Lease) Held(now time.Time) (tok hlc.HLC, why string, lapsed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lost:
		return hlc.HLC{}, "has lost", false
	case !now.Before(l.until):
		l.lost = true
		return hlc.HLC{}, "may have lost: its lease may have expired", true
	}
	return l.token, "", false
}

// Renewed records an applied renewal sent at sent.
func (l *Lease) Renewed(token hlc.HLC, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost {
		l.token = token
		l.until = sent.Add(l.TTL - Margin(l.TTL))
	}
}

// remaining is how long after now the lease may expire (zero once it may
// have).
func (l *Lease) remaining(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.until.Sub(now), 0)
}

// markLost marks the lease lost; it reports whether it was held until now.
func (l *Lease) markLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := !l.lost
	l.lost = true
	return was
}

// IsLost reports whether the lease was lost.
func (l *Lease) IsLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// stopRenewal tells the renewal goroutine to end, without waiting for it.
func (l *Lease) stopRenewal() { l.stopOnce.Do(func() { close(l.stop) }) }

// halt stops the renewal goroutine and waits for it.
func (l *Lease) halt() {
	l.stopRenewal()
	<-l.done
}

// Leases are the locks one rule holds. Each is a lease on its key, renewed
// by a goroutine of its own until it is released or lost. A lost one waits
// in lost, signalled on LostSignal, until the rule takes it to deliver its
// LOCK_LOST event: outside the mailbox, so that a full mailbox cannot
// swallow it.
type Leases struct {
	// svc gives the client, the logger, the registry (a lock wait watches
	// the lock key for its DELETE), the lease clock (see Lease.until) and
	// the host's lifetime, which ends renewals.
	svc  *Services
	rule string       // file name of the rule, for errors and logs
	rq   *serial.Rule // the rule's activity, in a serial host (host/internal/serial)
	// InCall reports whether the rule's handler is running: a lock wait
	// of the handler lets the others go on in a serial host (serial.Parker).
	// Nil: never; set before the rule's first call.
	InCall func() bool

	lostSignal chan struct{}  // cap 1: leases wait in lost
	wg         sync.WaitGroup // renewals

	mu   sync.Mutex
	m    map[string]*Lease
	lost []Lost // leases lost, not yet taken by the rule
}

// Services are what a rule's leases use of the host's services (the
// host's services.leaseServices).
type Services struct {
	Ctx    context.Context // the host's lifetime: renewals end with it
	Client Store
	Log    *slog.Logger
	Waits  Waiter           // the watch registry: a lock wait watches the lock key for its DELETE
	Clock  clock.Clock      // the host's clock: lock waits and renewals' wake-ups
	Now    func() time.Time // the lease clock (see Lease.until)
	Quiet  *serial.Quiet    // a serial host's activity and turn (nil: not serial)
}

// Store is what leases ask of the state store (the host's Store).
type Store interface {
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
	VDel(ctx context.Context, key, value []byte, opts protocol.DelOptions) (int64, error)
	// ClientID names the host's connection: the holder of its leases.
	ClientID() string
}

// Waiter is the watch registry (*watch.Registry): wake is called on each
// DELETE of key until release.
type Waiter interface {
	WaitDelete(ctx context.Context, key string, wake func()) (release func(), err error)
}

// New returns the leases of the rule named rule (its file name), whose
// activity in a serial host is rq (nil: none counted).
func New(svc *Services, rule string, rq *serial.Rule) *Leases {
	return &Leases{svc: svc, rule: rule, rq: rq, lostSignal: make(chan struct{}, 1), m: map[string]*Lease{}}
}

// Lost is a lease lost, awaiting its LOCK_LOST event, with its ticket
// in a serial host's order (host/internal/serial).
type Lost struct {
	Name   string
	Ticket uint64
}

// Holder is the lock value: "<client id>:<rule file name>", so two rules of
// one host, and the same rule on two hosts, are distinct holders.
func (ls *Leases) Holder() string { return ls.svc.Client.ClientID() + ":" + ls.rule }

// Activity is the rule's activity in a serial host (nil: none counted).
func (ls *Leases) Activity() *serial.Rule { return ls.rq }

// Now reads the lease clock.
func (ls *Leases) Now() time.Time { return ls.svc.Now() }

// Client is the store client the leases are taken with.
func (ls *Leases) Client() Store { return ls.svc.Client }

// LostSignal is signalled when lost leases wait to be taken (TakeLost).
func (ls *Leases) LostSignal() <-chan struct{} { return ls.lostSignal }

// lapsedReason explains a lease lost to its local expiry.
const lapsedReason = "no lock or renewal request applied within the ttl minus the safety margin: the lease may have expired"

// Get returns the lease name, or nil.
func (ls *Leases) Get(name string) *Lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[name]
}

// Names returns the names of the leases held.
func (ls *Leases) Names() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out []string
	for k := range ls.m {
		out = append(out, k)
	}
	return out
}

// heldToken returns the token of l if the rule holds it for certain, or why
// not. A lease found expired is lost: the rule gets LOCK_LOST.
func (ls *Leases) heldToken(l *Lease) (hlc.HLC, string) {
	tok, why, lapsed := l.Held(ls.svc.Now())
	if lapsed {
		ls.announceLoss(l, lapsedReason)
	}
	return tok, why
}

// Lock acquires (or returns) the lease name; see abi.Host.Lock. A lease
// that may have expired is not returned: the lock is taken again, with a new
// token.
func (ls *Leases) Lock(ctx context.Context, name string, ttl, wait time.Duration) (string, error) {
	if ttl < time.Millisecond {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be at least 1 ms", name)
	}
	if wait < 0 {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: wait must not be negative", name)
	}
	if l := ls.Get(name); l != nil {
		if tok, why := ls.heldToken(l); why == "" {
			return tok.String(), nil
		}
	}

	p := serial.NewParker(ls.svc.Quiet, ls.svc.Clock, ls.rq, ls.InCall != nil && ls.InCall())
	if wait > 0 {
		release, err := ls.svc.Waits.WaitDelete(ctx, name, p.Wake)
		if err != nil {
			return "", status.StoreError(err)
		}
		defer release()
	}
	deadline := ls.svc.Clock.Now().Add(wait)
	holder := ls.Holder()
	for {
		sent := ls.svc.Now()
		res, err := ls.svc.Client.Set(ctx, []byte(name), []byte(holder), protocol.SetOptions{Condition: protocol.CondNEX, Expiry: ttl})
		if err != nil {
			return "", status.StoreError(err)
		}
		if res.Applied {
			return ls.hold(name, holder, ttl, res.Version, sent), nil
		}
		remaining := deadline.Sub(ls.svc.Clock.Now())
		if wait == 0 || remaining <= 0 {
			return "", abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", name)
		}
		// Wait for the holder to let go: a DELETE notification, or a
		// periodic retry in case one was missed.
		if err := p.Wait(ctx, min(remaining, time.Second)); err != nil {
			return "", abi.Errorf(abi.StatusTimeout, "lock %q: gave up waiting: %w", name, err)
		}
	}
}

// hold records a lease acquired by a request sent at sent and starts its
// renewal.
func (ls *Leases) hold(name, holder string, ttl time.Duration, token hlc.HLC, sent time.Time) string {
	l := &Lease{Name: name, Holder: holder, TTL: ttl, token: token, until: sent.Add(ttl - Margin(ttl)),
		stop: make(chan struct{}), done: make(chan struct{})}
	ls.mu.Lock()
	old := ls.m[name]
	ls.m[name] = l
	ls.mu.Unlock()
	if old != nil {
		old.halt()
	}
	// Armed before the goroutine starts: a host on a virtual clock is not
	// idle without its renewal pending.
	t := serial.NewWake(ls.svc.Clock, ls.svc.Quiet)
	t.Reset(max(ttl/3, time.Millisecond))
	ls.wg.Add(1)
	go ls.renew(l, t)
	return token.String()
}

// renew extends the lease every ttl/3 (t, armed for the first) until it
// is released or lost. A renewal
// that finds another holder loses it; so does the lease's local expiry (no
// renewal applied in time, see lapsedReason): the rule gets a LOCK_LOST event
// and its fenced writes fail locally.
func (ls *Leases) renew(l *Lease, t *serial.Wake) {
	defer ls.wg.Done()
	defer close(l.done)
	interval := max(l.TTL/3, time.Millisecond)
	defer t.Stop()
	var lastErr error
	for {
		select {
		case <-l.stop:
			return
		case <-t.C():
		}
		next, goOn := ls.renewOnce(l, interval, &lastErr)
		if goOn {
			t.Reset(next) // before took: a host on a virtual clock is not idle without it
		}
		t.Took()
		if !goOn {
			return
		}
	}
}

// renewOnce is one turn of renew: it reports whether the renewal goes on,
// and when to try next.
func (ls *Leases) renewOnce(l *Lease, interval time.Duration, lastErr *error) (next time.Duration, goOn bool) {
	sent := ls.svc.Now()
	if _, why, lapsed := l.Held(sent); why != "" {
		if lapsed {
			reason := lapsedReason
			if *lastErr != nil {
				reason += " (renewals failed: " + (*lastErr).Error() + ")"
			}
			ls.announceLoss(l, reason)
		}
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ls.svc.Ctx, interval)
	res, err := ls.svc.Client.Set(ctx, []byte(l.Name), []byte(l.Holder), protocol.SetOptions{Condition: protocol.CondNEX, Expiry: l.TTL})
	cancel()
	switch {
	case err == nil && res.Applied:
		l.Renewed(res.Version, sent)
		*lastErr = nil
		// Keep the cadence of send times: the lease runs from them,
		// so a slow reply does not eat into the next renewal's slack.
		return max(interval-ls.svc.Now().Sub(sent), 0), true
	case err == nil:
		ls.LoseLease(l, "taken by another holder")
		return 0, false
	case ls.svc.Ctx.Err() != nil:
		return 0, false
	}
	*lastErr = err
	ls.svc.Log.Warn("lock renewal failed; retrying", "rule", ls.rule, "lock", l.Name, "err", err)
	// Retry, or wake when the lease may expire to report its loss.
	return min(interval, l.remaining(ls.svc.Now())), true
}

// LoseLease marks the lease lost and announces it, unless it was lost
// already.
func (ls *Leases) LoseLease(l *Lease, why string) {
	if l.markLost() {
		ls.announceLoss(l, why)
	}
}

// announceLoss stops the renewal of a lease just marked lost and queues it
// for its LOCK_LOST event.
func (ls *Leases) announceLoss(l *Lease, why string) {
	l.stopRenewal()
	ls.svc.Log.Warn("lock lost", "rule", ls.rule, "lock", l.Name, "reason", why)
	ls.mu.Lock()
	ls.svc.Quiet.Work(ls.rq, 1) // until its LOCK_LOST is delivered
	ls.lost = append(ls.lost, Lost{Name: l.Name, Ticket: ls.svc.Quiet.Ticket()})
	ls.mu.Unlock()
	ls.SignalLost()
}

// SignalLost signals LostSignal (without blocking).
func (ls *Leases) SignalLost() {
	select {
	case ls.lostSignal <- struct{}{}:
	default:
	}
}

// TakeLost returns the leases lost since the last call, for their LOCK_LOST
// events.
func (ls *Leases) TakeLost() []Lost {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	lost := ls.lost
	ls.lost = nil
	return lost
}

// GiveBack returns lost leases taken (TakeLost) and not delivered, ahead
// of those lost since, and signals them: a pool abandoned before it
// delivered them leaves them to the rule's next worker.
func (ls *Leases) GiveBack(lost []Lost) {
	ls.mu.Lock()
	ls.lost = append(lost, ls.lost...)
	ls.mu.Unlock()
	ls.SignalLost()
}

// Losing reports whether lost leases wait to be taken.
func (ls *Leases) Losing() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.lost) > 0
}

// Unlock releases the lease name; see abi.Host.Unlock.
func (ls *Leases) Unlock(ctx context.Context, name string) error {
	ls.mu.Lock()
	l := ls.m[name]
	delete(ls.m, name)
	ls.mu.Unlock()
	if l == nil {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held by this rule", name)
	}
	if err := ls.release(ctx, l); err != nil {
		return status.StoreError(err)
	}
	return nil
}

// release stops renewal and deletes the lock key if it still holds this
// holder (VDEL: never another holder's lock).
func (ls *Leases) release(ctx context.Context, l *Lease) error {
	l.halt()
	if l.IsLost() {
		return nil
	}
	_, err := ls.svc.Client.VDel(ctx, []byte(l.Name), []byte(l.Holder), protocol.DelOptions{})
	if err != nil && !errors.Is(err, protocol.ErrNotConnected) {
		return err
	}
	return nil
}

// ReleaseAll releases every lease (a failure is logged) and waits until
// their renewals have ended.
func (ls *Leases) ReleaseAll(ctx context.Context) {
	ls.mu.Lock()
	m := ls.m
	ls.m = map[string]*Lease{}
	ls.mu.Unlock()
	for _, l := range m {
		if err := ls.release(ctx, l); err != nil {
			ls.svc.Log.Warn("releasing lock failed", "rule", ls.rule, "lock", l.Name, "err", err)
		}
	}
	ls.wg.Wait()
	ls.mu.Lock()
	ls.svc.Quiet.Work(ls.rq, -len(ls.lost)) // no LOCK_LOST for a stopped rule
	ls.lost = nil
	ls.mu.Unlock()
}

// FenceToken returns the token to attach to a write fenced with the lock
// name, or a LOCK_LOST error when the rule does not hold it (any more), or
// its lease may have expired (see Margin). It is checked just before the
// write is sent.
func (ls *Leases) FenceToken(verb, key, name string) (hlc.HLC, error) {
	if name == "" {
		return hlc.HLC{}, nil
	}
	l := ls.Get(name)
	if l == nil {
		return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %q: fenced with lock %q, which rule %s does not hold", verb, key, name, ls.rule)
	}
	tok, why := ls.heldToken(l)
	if why != "" {
		return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %q: fenced with lock %q, which rule %s %s", verb, key, name, ls.rule, why)
	}
	return tok, nil
}
