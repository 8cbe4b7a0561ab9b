package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/staging"
)

// A canary reload (RuleConfig.Canary) proves a new version of a rule file
// on live traffic before it drives anything. When the file changes, the new
// version starts in shadow next to the live one, which stays in charge:
//
//   - both get every event of the rule, in order, in the rule's worker: the
//     shadow first, then the live version, so both read the store as it was
//     before the event;
//   - the shadow writes nothing: its set, del, vdel, lock and unlock are
//     staged in a layer over the store of its own (as in a dry run, see
//     dryrun.go: its reads see its own staged writes of the event, then
//     the store; its locks are held in the layer for the whole window),
//     its timer and cancel calls succeed and do nothing, and its watches
//     are staged;
//   - after each event, the shadow's writes (SET, DEL, VDEL; locks are not
//     compared) are compared with those the live version made for the same
//     event: same number, and one by one the same op, key and value, in
//     order. A key matching one of Ignore is left out on both sides; values
//     that both parse as numbers are equal within Tolerance.
//
// At the first event whose writes differ the canary is refused: the log
// shows the event, the live writes and the shadow's, the shadow is closed,
// the old version stays live and the rule's status is StateCanaryRefused
// until the file changes again. When the window ends (Events events
// compared, or Duration passed, whichever first) with no difference, the
// shadow becomes the live version between two events, as a normal reload
// does: its staged watches applied, no event lost or handled twice. A
// window that ends by Duration with no event at all passes: nothing
// differed. Timers the new version arms while it starts are not armed (the
// live version's stay, and the new version inherits them).
//
// The shadow gets the events of the live version's watches (a key only the
// new version watches reaches it once it is live). A write the live version
// makes outside a handler (a plugin's own goroutine) counts in the event
// being handled. Saving the file back to the live version drops the shadow
// (and a refusal); saving another version replaces the shadow, with a new
// window. A first load and a dry run do not canary.

// canary is a new version of a rule running in shadow. The rule's worker
// owns it (it is set, judged and ended there); liveWs is also appended to
// by the rule's writes.
type canary struct {
	r      *rule
	in     *instance
	cfg    Canary
	st     *staging.Staging // closed when the window ends (detach)
	timer  clock.Timer      // ends the window after Duration (nil: none)
	begun  time.Time        // the window started
	owed   atomic.Bool      // the window's end rang (ring) and the worker has not swapped yet
	n      int              // events compared
	inCall atomic.Bool      // the worker is in the shadow's handler
	live   atomic.Bool      // promoted: its binding writes to the store

	mu       sync.Mutex
	liveWs   []staging.Write // of the event being handled
	shadowWs []staging.Write
	locks    map[string]bool // keys the shadow has locked or unlocked
}

// newCanary returns the canary of the version in of r, and the staging its
// binding writes to. If its shadow does not start, discard it.
func newCanary(r *rule, in *instance, cfg Canary) (*canary, error) {
	c := &canary{r: r, in: in, cfg: cfg, locks: map[string]bool{}}
	st, err := staging.NewStaging(r.svc.client, r.svc.timers.Clock.NowMs, ReservedPrefix, r.svc.log, c.staged)
	if err != nil {
		return nil, fmt.Errorf("canary of %s: %w", r.path, err)
	}
	c.st = st
	return c, nil
}

// discard closes the canary's staging: its window ended (detach), or its
// shadow did not start. Closing it again does nothing.
func (c *canary) discard() {
	if err := c.st.Close(); err != nil {
		c.r.svc.log.Warn("canary: closing its staging failed", "rule", c.r.name, "err", err)
	}
}

// staged is the staging's report: a write of the shadow.
func (c *canary) staged(w staging.Write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.Op == "LOCK" || w.Op == "UNLOCK" {
		c.locks[w.Key] = true
		return
	}
	c.shadowWs = append(c.shadowWs, w)
}

// wroteLive records a write of the live version.
func (c *canary) wroteLive(op, key string, value []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.liveWs = append(c.liveWs, staging.Write{Op: op, Key: key, Value: bytes.Clone(value)})
}

// reset forgets the writes of the last event and its staged keys (the
// store has the live version's), but not the shadow's locks.
func (c *canary) reset() {
	c.mu.Lock()
	c.liveWs, c.shadowWs = nil, nil
	locks := maps.Clone(c.locks)
	c.mu.Unlock()
	c.st.Drop(func(key string) bool { return locks[key] })
}

// differs reports whether the writes of the event differ, and returns both
// sides without the ignored keys.
func (c *canary) differs() (live, shadow []staging.Write, differ bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	live, shadow = c.compared(c.liveWs), c.compared(c.shadowWs)
	if len(live) != len(shadow) {
		return live, shadow, true
	}
	for i := range live {
		if !c.same(live[i], shadow[i]) {
			return live, shadow, true
		}
	}
	return live, shadow, false
}

func (c *canary) compared(ws []staging.Write) []staging.Write {
	var out []staging.Write
	for _, w := range ws {
		if c.cfg.Ignore == nil || !allowed(c.cfg.Ignore, w.Key) {
			out = append(out, w)
		}
	}
	return out
}

// same reports whether two writes match: op, key, and value (numbers
// within the tolerance; a del's value is not compared).
func (c *canary) same(a, b staging.Write) bool {
	if a.Op != b.Op || a.Key != b.Key {
		return false
	}
	if a.Op == "DEL" || bytes.Equal(a.Value, b.Value) {
		return true
	}
	x, errx := strconv.ParseFloat(string(a.Value), 64)
	y, erry := strconv.ParseFloat(string(b.Value), 64)
	return errx == nil && erry == nil && math.Abs(x-y) <= c.cfg.Tolerance
}

// over reports whether the window has ended.
func (c *canary) over() bool {
	return (c.cfg.Events > 0 && c.n >= c.cfg.Events) ||
		(c.cfg.Duration > 0 && c.r.svc.clock.Now().Sub(c.begun) >= c.cfg.Duration)
}

// writesOf renders writes for the log.
func writesOf(ws []staging.Write) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Op + " " + w.Key
		if w.Op != "DEL" {
			out[i] += " " + strconv.Quote(string(w.Value))
		}
	}
	return out
}

var _ shadowVersion = (*canary)(nil)

// shadowRuns reports whether the version of r with hash already runs in
// shadow.
func shadowRuns(r *rule, hash [32]byte) bool {
	c, ok := r.shadowing().(*canary)
	return ok && c.in.hash == hash
}

// settleCanary drops the shadow of r, if any, and its refusal: the file
// is back to the live version. It runs in r's worker.
func settleCanary(ctx context.Context, r *rule) error {
	w := r.worker()
	if r.canaryIdle() || w == nil {
		return nil
	}
	err := w.do(ctx, r.config().Grace, func() {
		if sh := r.shadowing(); sh != nil {
			sh.end(ctx, "the file is back to the live version")
		}
		r.setShadow(nil) // and forget a refusal
	})
	if err != nil && !errors.Is(err, errRuleStopped) {
		return fmt.Errorf("drop the shadow of %s: %w", r.path, err)
	}
	return nil
}

// start makes c the shadow of its rule, in the rule's worker; a shadow
// already running is dropped first. hostCtx is the host's lifetime (see
// closeInstance). When the live version is stuck, it is abandoned and the
// new version dropped: the next change of the file tries again.
func (c *canary) start(ctx, hostCtx context.Context) error {
	r := c.r
	w := r.worker()
	if w == nil {
		w = r.startWorker()
	}
	err := w.do(ctx, r.config().Grace, func() {
		if old := r.shadowing(); old != nil {
			old.end(hostCtx, "replaced by a newer version")
		}
		c.begun = r.svc.clock.Now()
		if d := c.cfg.Duration; d > 0 {
			c.timer = r.svc.clock.AfterFunc(d, c.ring)
		}
		r.setShadow(c)
		r.svc.log.Info("canary: new version runs in shadow", "rule", r.name,
			"events", c.cfg.Events, "duration", c.cfg.Duration)
	})
	if err != nil {
		if errors.Is(err, errStuck) {
			r.abandoned(w, "canary reload")
			r.startWorker()
		}
		c.discard()
		r.closeInstance(ctx, c.in, "new version")
		return fmt.Errorf("start %s in shadow: %w", r.path, err)
	}
	return nil
}

// handle implements shadowVersion.
func (c *canary) handle(w *worker, ev abi.Event, timeout time.Duration) bool {
	c.reset()
	c.inCall.Store(true)
	call := w.begin(timeout, ev.Key, ev.Op)
	err := c.in.script.Handle(w.ctx, ev)
	c.inCall.Store(false)
	if !w.end(call) {
		if err := c.in.script.Close(context.Background()); err != nil {
			c.r.svc.log.Warn("closing an abandoned shadow failed", "rule", c.r.name, "err", err)
		}
		return false
	}
	if err != nil && w.ctx.Err() == nil {
		c.r.svc.log.Warn("canary: the shadow failed", "rule", c.r.name, "key", ev.Key, "op", string(ev.Op), "err", err)
	}
	return true
}

// judge implements shadowVersion: at the first difference the canary is
// refused; otherwise the event counts, and the window may be over.
func (c *canary) judge(ctx context.Context, ev abi.Event) {
	r := c.r
	if r.shadowing() != c {
		return // ended meanwhile
	}
	live, shadow, differ := c.differs()
	if !differ {
		c.n++
		c.due()
		return
	}
	r.svc.log.Error("canary refused: the new version writes differently; the previous version stays live",
		"rule", r.name, "event", fmt.Sprintf("%s %s %q", ev.Op, ev.Key, ev.Value),
		"live", writesOf(live), "shadow", writesOf(shadow), "after_events", c.n)
	c.end(ctx, "")
	r.refuseCanary(fmt.Sprintf("canary refused at event %s %q %q: live wrote %q, the new version %q",
		ev.Op, ev.Key, ev.Value, writesOf(live), writesOf(shadow)))
}

// ring ends the window by Duration: it wakes the worker, which swaps the
// shadow in (due). Until then it counts as activity (internal/serial).
func (c *canary) ring() {
	c.r.svc.quiet.Add(1)
	if !c.owed.CompareAndSwap(false, true) {
		c.r.svc.quiet.Add(-1)
	}
	c.r.mailbox.Signal()
}

// settle ends the activity of a ring.
func (c *canary) settle() {
	if c.owed.CompareAndSwap(true, false) {
		c.r.svc.quiet.Add(-1)
	}
}

// due implements shadowVersion: the shadow is swapped in as a reload's
// new version, its staged watches applied.
func (c *canary) due() {
	defer c.settle()
	if !c.over() || c.r.shadowing() != c {
		return
	}
	r := c.r
	c.detach()
	c.reset()
	c.live.Store(true)
	r.svc.log.Info("canary passed: the new version is live", "rule", r.name, "events", c.n, "after", r.svc.clock.Now().Sub(c.begun).Round(time.Millisecond))
	r.swap(r.svc.ctx, c.in)
}

// detach ends c's window: its rule no longer runs it in shadow, and its
// staging is closed (a shadow still in a call is refused its writes).
func (c *canary) detach() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.r.dropShadow(c)
	c.discard()
}

// end implements shadowVersion. It runs in the worker, or once the worker
// is abandoned: a shadow in its call is then left to the worker, which
// closes it when the call returns.
func (c *canary) end(ctx context.Context, why string) {
	defer c.settle()
	c.detach()
	if why != "" {
		c.r.svc.log.Info("canary ended: the new version is dropped", "rule", c.r.name, "why", why)
	}
	if c.inCall.Load() {
		c.in.closed.Store(true)
		return
	}
	c.r.closeInstance(ctx, c.in, "shadow version")
}

// shadowed is the link of a canary's shadow in its abi.Host chain
// (binding.chain): its calls go to the staging link until the canary is
// promoted, then to the store link, live.
type shadowed struct {
	c            *canary
	staged, live abi.Host
}

var _ abi.Host = (*shadowed)(nil)

// next is where a call goes now.
func (s *shadowed) next() abi.Host {
	if s.c.live.Load() {
		return s.live
	}
	return s.staged
}

func (s *shadowed) Get(ctx context.Context, key string) (abi.Value, error) {
	return s.next().Get(ctx, key)
}

func (s *shadowed) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	return s.next().Set(ctx, key, value, opts)
}

func (s *shadowed) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	return s.next().Del(ctx, key, opts)
}

func (s *shadowed) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	return s.next().VDel(ctx, key, value, opts)
}

func (s *shadowed) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	return s.next().Watch(ctx, key, opts)
}

func (s *shadowed) Unwatch(ctx context.Context, key string) error {
	return s.next().Unwatch(ctx, key)
}

func (s *shadowed) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	return s.next().Keys(ctx, pattern, opts)
}

func (s *shadowed) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	return s.next().WatchPattern(ctx, pattern, opts)
}

func (s *shadowed) UnwatchPattern(ctx context.Context, pattern string) error {
	return s.next().UnwatchPattern(ctx, pattern)
}

func (s *shadowed) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	return s.next().Lock(ctx, name, ttl, opts)
}

func (s *shadowed) Unlock(ctx context.Context, name string) error {
	return s.next().Unlock(ctx, name)
}

func (s *shadowed) Log(level int32, msg string) { s.next().Log(level, msg) }

func (s *shadowed) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	return s.next().Timer(ctx, name, delay, opts)
}

func (s *shadowed) Cancel(ctx context.Context, name string) error {
	return s.next().Cancel(ctx, name)
}

func (s *shadowed) Now() int64 { return s.next().Now() }
