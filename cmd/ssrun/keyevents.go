package main

import (
	"context"
	"fmt"

	"github.com/ssrun/ssrun/protocol"
)

// notifyKeys registers a KEYNOTIFY on each key with c (for verb's errors).
func notifyKeys(ctx context.Context, c *protocol.Client, verb string, keys []string) error {
	for _, k := range keys {
		if err := c.KeyNotify(ctx, []byte(k), protocol.CallOptions{}); err != nil {
			return fmt.Errorf("%s: watch %q: %w", verb, k, err)
		}
	}
	return nil
}

// eachEvent passes every event of c to handle until ctx ends (nil), handle
// fails (its error), or c's stream closes (an error naming verb).
func eachEvent(ctx context.Context, c *protocol.Client, verb string, handle func(protocol.Event) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-c.Events():
			if !ok {
				return fmt.Errorf("%s: client closed", verb)
			}
			if err := handle(ev); err != nil {
				return err
			}
		}
	}
}
