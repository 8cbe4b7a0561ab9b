package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// outWatch is a client that watches the keys rules write (KEYNOTIFY) and
// times change-to-write latency: how long after a probe starts its value
// becomes visible, as a notification, in the keys it should reach. One
// probe at a time; notifications of other values are ignored.
type outWatch struct {
	c *protocol.Client

	mu sync.Mutex
	p  *probe // the probe in progress, or nil
}

// probe is one change awaited in want keys.
type probe struct {
	value string
	t0    time.Time
	want  int             // notifications still awaited
	took  []time.Duration // from t0 to each notification seen
	seen  chan struct{}   // closed when want reaches 0
}

// startOutWatch connects a client to addr and registers KEYNOTIFY on keys
// (16 at a time); it stops when the test ends.
func startOutWatch(tb testing.TB, addr string, log *slog.Logger, keys []string) *outWatch {
	tb.Helper()
	o := &outWatch{c: dial(tb, addr, "outwatch", log)}
	testutil.InFlight(tb, 16, len(keys), func(_, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := o.c.KeyNotify(ctx, []byte(keys[i]), protocol.CallOptions{}); err != nil {
			return fmt.Errorf("keynotify %s: %w", keys[i], err)
		}
		return nil
	})
	onNotify(tb, o.c, func(_ context.Context, ev protocol.Event) { o.notified(ev) })
	return o
}

// notified takes a notification of a watched key.
func (o *outWatch) notified(ev protocol.Event) {
	at := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if p := o.p; p != nil && string(ev.Value) == p.value {
		p.took = append(p.took, at.Sub(p.t0))
		if p.want--; p.want == 0 {
			close(p.seen)
			o.p = nil
		}
	}
}

// measure starts a probe of value, awaited in writes watched keys, calls
// set (which must make the change), and returns the time from just before
// set to each notification of value. The value must be new to the watched
// keys. It fails tb if the writes are not all seen within a minute.
func (o *outWatch) measure(tb testing.TB, value string, writes int, set func()) []time.Duration {
	tb.Helper()
	p := &probe{value: value, want: writes, seen: make(chan struct{})}
	o.mu.Lock()
	o.p = p
	p.t0 = time.Now()
	o.mu.Unlock()
	set()
	select {
	case <-p.seen:
		return p.took
	case <-time.After(time.Minute):
		o.mu.Lock()
		defer o.mu.Unlock()
		o.p = nil
		tb.Fatalf("probe %q: %d of %d writes seen in a minute", value, len(p.took), writes)
		return nil
	}
}

// quantile returns the q quantile (0..1, nearest rank) of ds, which it
// sorts.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
