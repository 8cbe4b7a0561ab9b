package abitest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// Keys lists the matching keys in order, pages included, without the
// reserved ones or those Deny refuses; a malformed pattern is INVALID, a
// reserved one DENIED, and more keys than the limit LIMIT, never a cut
// list.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	h := abitest.New()
	var want []string
	for i := range 2500 { // more than a SCAN page
		k := fmt.Sprintf("t/%04d/sp", i)
		h.Put(k, []byte("1"))
		if i%10 != 3 {
			want = append(want, k)
		}
	}
	h.Put("t/x", []byte("1"))
	h.Put("$ssrun/t/0001/sp", []byte("1"))
	h.Deny = func(verb, key string) bool { return verb == abi.FnGet && strings.HasSuffix(key, "3/sp") }
	got, err := h.Keys(ctx, "t/*/sp", abi.KeysOptions{Limit: abi.MaxKeysLimit})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Keys = %d keys (%v), want %d", len(got), err, len(want))
	}
	if _, err := h.Keys(ctx, "t/*/sp", abi.KeysOptions{}); abi.StatusOf(err) != abi.StatusLimit {
		t.Errorf("Keys past the default limit: %v, want LIMIT", err)
	}
	if got, err := h.Keys(ctx, "*ssrun*", abi.KeysOptions{}); err != nil || len(got) != 0 {
		t.Errorf("Keys(*ssrun*) = %q, %v: a reserved key listed", got, err)
	}
	for pattern, st := range map[string]abi.Status{"[": abi.StatusInvalid, `\`: abi.StatusInvalid, "": abi.StatusInvalid, "$ssrun/*": abi.StatusDenied} {
		if _, err := h.Keys(ctx, pattern, abi.KeysOptions{}); abi.StatusOf(err) != st {
			t.Errorf("Keys(%q) = %v, want %s", pattern, err, st)
		}
	}
	for _, limit := range []int{-1, abi.MaxKeysLimit + 1} {
		if _, err := h.Keys(ctx, "t/*", abi.KeysOptions{Limit: limit}); abi.StatusOf(err) != abi.StatusInvalid {
			t.Errorf("Keys with limit %d = %v, want INVALID", limit, err)
		}
	}
}

// WatchPattern records the pattern, refuses one covering more keys than
// MaxWatchedKeys with LIMIT, and UnwatchPattern ends it (NOT_FOUND after).
func TestWatchPattern(t *testing.T) {
	ctx := context.Background()
	h := abitest.New()
	h.MaxWatchedKeys = 3
	for i := range 4 {
		h.Put(fmt.Sprintf("a/%d", i), nil)
	}
	if err := h.WatchPattern(ctx, "a/[0-2]", abi.WatchOptions{Self: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.WatchPattern(ctx, "a/*", abi.WatchOptions{}); abi.StatusOf(err) != abi.StatusLimit {
		t.Errorf("WatchPattern over 4 keys with a bound of 3: %v, want LIMIT", err)
	}
	if got := h.Patterns(); len(got) != 1 || !got["a/[0-2]"].Self {
		t.Errorf("Patterns = %v", got)
	}
	if err := h.UnwatchPattern(ctx, "a/[0-2]"); err != nil {
		t.Fatal(err)
	}
	if err := h.UnwatchPattern(ctx, "a/[0-2]"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("second UnwatchPattern = %v, want NOT_FOUND", err)
	}
}
