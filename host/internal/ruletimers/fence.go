package ruletimers

import (
	"context"
	"errors"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// The writes of a rule's timer bookkeeping (its records, index shards and
// directory: internal/timers). In a group (host/internal/group) a shared
// rule's timers move with it, so they are written like its other keys:
// fenced with its ownership lease. A host that lost the rule (paused, cut
// off) cannot write them once it knows, and the store refuses its late
// writes once the next owner has written them.

// timerFence returns the token a write of rule's timer key carries: the
// zero token outside a group or for a rule the group does not share, or
// LOCK_LOST when this host no longer owns the rule for certain.
func timerFence(svc *Services, rule, verb, key string) (hlc.HLC, error) {
	if svc.Fence == nil {
		return hlc.HLC{}, nil
	}
	return svc.Fence(rule, verb, key)
}

// setTimerKey writes a timer key of rule, fenced.
func setTimerKey(ctx context.Context, svc *Services, rule, key string, value []byte) error {
	tok, err := timerFence(svc, rule, "set", key)
	if err != nil {
		return err
	}
	_, err = svc.Store.Set(ctx, []byte(key), value, protocol.SetOptions{FencingToken: tok})
	return err
}

// delTimerKey deletes a timer key of rule, fenced.
func delTimerKey(ctx context.Context, svc *Services, rule, key string) error {
	tok, err := timerFence(svc, rule, "del", key)
	if err != nil {
		return err
	}
	_, err = svc.Store.Del(ctx, []byte(key), protocol.DelOptions{FencingToken: tok})
	return err
}

// fenceRefused reports whether err refused a shared rule's write for its
// fence: this host's own check found the rule's ownership lost, or the
// store holds the key under a later owner's token. Such a write is not
// retried: it could only be refused again. (A write without a token to a
// key a group fenced, "a fencing token is required", is no lost ownership:
// it is retried and logged as any failed write.)
func fenceRefused(err error) bool {
	return abi.StatusOf(err) == abi.StatusLockLost || errors.Is(err, protocol.ErrFencingTokenLowerVersion)
}
