package testutil

import (
	"context"
	"testing"
)

// CloseAtEnd calls closer when tb ends (tb.Cleanup), with WaitBound to
// finish; an error fails tb with "close <what>: <error>". Like t.Cleanup,
// what is registered last is closed first: register a runtime before the
// host that uses it.
func CloseAtEnd(tb testing.TB, what string, closer func(context.Context) error) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), WaitBound)
		defer cancel()
		if err := closer(ctx); err != nil {
			tb.Errorf("close %s: %v", what, err)
		}
	})
}
