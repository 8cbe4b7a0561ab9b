package guest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// TestRevision2Host: a plugin calling the revision-3 verbs on a host that
// lacks them (rev1Host: nor, here, any other) gets STATUS_INTERNAL naming
// gRPC's "Unimplemented", with the verb and pattern, and no keys.
func TestRevision2Host(t *testing.T) {
	var stderr bytes.Buffer
	h := dialHost(t, rev1Host{}, &stderr)
	ctx := context.Background()
	keys, keysErr := h.Keys(ctx, "p/*", abi.KeysOptions{Limit: 5})
	if keys != nil {
		t.Errorf("keys %q from a host without keys", keys)
	}
	for verb, err := range map[string]error{
		abi.FnKeys:           keysErr,
		abi.FnWatchPattern:   h.WatchPattern(ctx, "p/*", abi.WatchOptions{Self: true}),
		abi.FnUnwatchPattern: h.UnwatchPattern(ctx, "p/*"),
	} {
		var e *abi.Error
		if !errors.As(err, &e) || e.Status != abi.StatusInternal || !strings.HasPrefix(e.Msg, verb+` "p/*": host call failed: `) ||
			!strings.Contains(e.Msg, "Unimplemented") {
			t.Errorf("%s: %v (%s), want INTERNAL naming Unimplemented", verb, err, abi.StatusOf(err))
		}
	}
}
