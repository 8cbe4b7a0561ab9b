package patternwatch

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/inproc/inproctest"
	"github.com/ssrun/ssrun/protocol"
)

// newHub returns a hub over a store in process holding keys (each set to
// "v"), with "$ssrun/" as the reserved prefix.
func newHub(t *testing.T, keys ...string) *Hub {
	t.Helper()
	vc := clock.NewVirtual(time.Unix(1_700_000_000, 0))
	c := inproctest.Client(t, inproctest.Server(vc.Now), "host", vc.Now)
	log := slog.New(slog.DiscardHandler)
	for _, k := range keys {
		if _, err := c.Set(context.Background(), []byte(k), []byte("v"), protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return NewHub(c, log, vc, nil, "$ssrun/")
}

// Scan lists the keys a pattern matches, sorted, never the reserved ones,
// filtered by keep, and stops past its bound (incomplete).
func TestScanSortedBoundedNeverReserved(t *testing.T) {
	h := newHub(t, "a/3", "a/1", "a/2", "b/1", "$ssrun/a/1", "$ssrun/timer/x")
	ctx := context.Background()
	for _, c := range []struct {
		pattern  string
		bound    int
		keep     func(string) bool
		want     []string
		complete bool
	}{
		{"a/*", 10, nil, []string{"a/1", "a/2", "a/3"}, true},
		{"*", 10, nil, []string{"a/1", "a/2", "a/3", "b/1"}, true},
		{"*", 4, nil, []string{"a/1", "a/2", "a/3", "b/1"}, true},
		{"a/*", 2, nil, []string{"a/1", "a/2"}, false},
		{"*", 10, func(k string) bool { return k != "a/2" }, []string{"a/1", "a/3", "b/1"}, true},
		{"$ssrun/*", 10, nil, nil, true},
		{"c/*", 10, nil, nil, true},
	} {
		keys, complete, err := h.Scan(ctx, c.pattern, c.bound, c.keep)
		if err != nil || !slices.Equal(keys, c.want) || complete != c.complete {
			t.Errorf("Scan(%q, %d) = %q, %v, %v; want %q, %v", c.pattern, c.bound, keys, complete, err, c.want, c.complete)
		}
	}
	if s := h.Stats(); s.Scans != 7 || s.Pages == 0 || s.Patterns != 0 {
		t.Errorf("stats %+v: want 7 scans, their pages, no pattern watched", s)
	}
}

// getSetOnly is a Store that cannot list keys.
type getSetOnly struct{ Store }

// A store client that cannot list keys fails a scan with STORE_ERROR.
func TestScanNeedsAScanner(t *testing.T) {
	h := NewHub(getSetOnly{}, slog.New(slog.DiscardHandler), clock.Real{}, nil, "$ssrun/")
	if _, _, err := h.Scan(context.Background(), "a/*", 10, nil); abi.StatusOf(err) != abi.StatusStoreError {
		t.Fatalf("scan without SCAN: %v, want STORE_ERROR", err)
	}
}
