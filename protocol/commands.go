package protocol

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
)

// Condition is the condition of a SET.
type Condition uint8

// SET conditions (statestore-protocol.md §6, §12.2).
const (
	CondNone Condition = iota // set unconditionally
	CondNX                    // set only if the key is absent
	CondNEX                   // set if absent or the stored value equals the new one
)

// SetOptions are the options of Set.
type SetOptions struct {
	Condition Condition
	// Expiry, when positive, makes the key expire after it (PX, whole
	// milliseconds; at least 1 ms).
	Expiry time.Duration
	// FencingToken, when non-zero, is sent as `__ft`.
	FencingToken hlc.HLC
	// Timeout overrides Config.Timeout for this call.
	Timeout time.Duration
	// Persist asks the store to persist the key (`aio-persistence: true`).
	Persist bool
}

// SetResult is the outcome of Set.
type SetResult struct {
	// Applied is false when the NX/NEX condition did not hold.
	Applied bool
	// Version is the new version when applied, else the stored one.
	Version hlc.HLC
}

// GetResult is the outcome of Get.
type GetResult struct {
	Value   []byte
	Version hlc.HLC
	Found   bool
}

// DelOptions are the options of Del and VDel.
type DelOptions struct {
	// FencingToken, when non-zero, is sent as `__ft`.
	FencingToken hlc.HLC
	// Timeout overrides Config.Timeout for this call.
	Timeout time.Duration
}

// CallOptions are the options of Get, KeyNotify and KeyNotifyStop.
type CallOptions struct {
	// Timeout overrides Config.Timeout for this call.
	Timeout time.Duration
}

// checkKey rejects an empty key locally, with the error the server would
// give (ErrKeyLengthZero), without a round trip.
func checkKey(cmd string, key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("protocol: %s: empty key rejected locally: %w", cmd, ErrKeyLengthZero)
	}
	return nil
}

// Get reads key. A missing or expired key gives Found=false and no error.
// The reply `$-1`, and `:0`/`:-1` (which other SDKs also accept), mean absent.
func (c *Client) Get(ctx context.Context, key []byte, opts CallOptions) (GetResult, error) {
	if err := checkKey(cmdGet, key); err != nil {
		return GetResult{}, err
	}
	rep, err := c.call(ctx, cmdGet, key, [][]byte{bGet, key}, callOpts{timeout: opts.Timeout})
	if err != nil {
		return GetResult{}, err
	}
	res, err := getResult(rep)
	if err != nil {
		return GetResult{}, fmt.Errorf("protocol: %s %s: %w", cmdGet, keyText(key), err)
	}
	return res, nil
}

func getResult(rep reply) (GetResult, error) {
	switch {
	case rep.r.Kind == resp.KindBulk:
		if !rep.hasVersion {
			return GetResult{}, fmt.Errorf("%w: value without a version (__ts)", ErrUnexpectedReply)
		}
		return GetResult{Value: rep.r.Str, Version: rep.version, Found: true}, nil
	case rep.r.Kind == resp.KindNil, rep.r.Kind == resp.KindInteger && (rep.r.Int == 0 || rep.r.Int == -1):
		return GetResult{}, nil
	}
	return GetResult{}, unexpected(rep.r)
}

// Set writes key=value. With CondNX or CondNEX a SET that does not apply
// returns Applied=false and the stored version; that is not an error.
func (c *Client) Set(ctx context.Context, key, value []byte, opts SetOptions) (SetResult, error) {
	if err := checkKey(cmdSet, key); err != nil {
		return SetResult{}, err
	}
	args := make([][]byte, 3, 6)
	args[0], args[1], args[2] = bSet, key, value
	if args[2] == nil {
		args[2] = []byte{}
	}
	switch opts.Condition {
	case CondNone:
	case CondNX:
		args = append(args, bNX)
	case CondNEX:
		args = append(args, bNEX)
	default:
		return SetResult{}, fmt.Errorf("protocol: %s %s: unknown condition %d", cmdSet, keyText(key), opts.Condition)
	}
	if opts.Expiry < 0 {
		return SetResult{}, fmt.Errorf("protocol: %s %s: negative expiry %v", cmdSet, keyText(key), opts.Expiry)
	}
	if opts.Expiry > 0 {
		ms := max(opts.Expiry.Milliseconds(), 1) // PX 0 is a syntax error
		args = append(args, bPX, strconv.AppendInt(nil, ms, 10))
	}
	rep, err := c.call(ctx, cmdSet, key, args, callOpts{timeout: opts.Timeout, fence: opts.FencingToken, persist: opts.Persist})
	if err != nil {
		return SetResult{}, err
	}
	res, err := setResult(rep)
	if err != nil {
		return SetResult{}, fmt.Errorf("protocol: %s %s: %w", cmdSet, keyText(key), err)
	}
	return res, nil
}

// setResult accepts `+OK` (applied) and `:-1` (not applied), both with a
// version; also `$-1` and `:0` as not applied, as other SDKs do.
func setResult(rep reply) (SetResult, error) {
	var res SetResult
	switch {
	case rep.r.Kind == resp.KindSimple && string(rep.r.Str) == "OK":
		res.Applied = true
	case rep.r.Kind == resp.KindInteger && (rep.r.Int == -1 || rep.r.Int == 0), rep.r.Kind == resp.KindNil:
	default:
		return SetResult{}, unexpected(rep.r)
	}
	if !rep.hasVersion {
		return SetResult{}, fmt.Errorf("%w: SET reply without a version (__ts)", ErrUnexpectedReply)
	}
	res.Version = rep.version
	return res, nil
}

// Del deletes key: 1 when it was removed, 0 when it was absent.
func (c *Client) Del(ctx context.Context, key []byte, opts DelOptions) (int64, error) {
	if err := checkKey(cmdDel, key); err != nil {
		return 0, err
	}
	return c.delete(ctx, cmdDel, key, [][]byte{bDel, key}, opts)
}

// VDel deletes key if its value equals value: 1 removed, 0 absent, -1 the
// value differs (nothing changed).
func (c *Client) VDel(ctx context.Context, key, value []byte, opts DelOptions) (int64, error) {
	if err := checkKey(cmdVDel, key); err != nil {
		return 0, err
	}
	if value == nil {
		value = []byte{}
	}
	return c.delete(ctx, cmdVDel, key, [][]byte{bVDel, key, value}, opts)
}

func (c *Client) delete(ctx context.Context, cmd string, key []byte, args [][]byte, opts DelOptions) (int64, error) {
	rep, err := c.call(ctx, cmd, key, args, callOpts{timeout: opts.Timeout, fence: opts.FencingToken})
	if err != nil {
		return 0, err
	}
	if rep.r.Kind != resp.KindInteger || rep.r.Int < -1 || rep.r.Int > 1 || (cmd == cmdDel && rep.r.Int == -1) {
		return 0, fmt.Errorf("protocol: %s %s: %w", cmd, keyText(key), unexpected(rep.r))
	}
	return rep.r.Int, nil
}

// KeyNotify registers this client for notifications of key's changes and
// adds key to the set the client re-registers on every (re)connection. When
// it fails with ErrNotConnected the key stays in that set, so it is
// registered on the next connection, before EventConnected; on any other
// error it is not tracked (unless an earlier KeyNotify succeeded). A `:0`
// reply (already registered, which one SDK tolerates) counts as success.
func (c *Client) KeyNotify(ctx context.Context, key []byte, opts CallOptions) error {
	if err := checkKey(cmdKeyNotify, key); err != nil {
		return err
	}
	k := string(key)
	c.rmu.Lock()
	_, had := c.watched[k]
	if !had {
		c.watched[k] = &lastNotify{}
	}
	c.rmu.Unlock()
	rep, err := c.call(ctx, cmdKeyNotify, key, [][]byte{bKeyNotify, key}, callOpts{timeout: opts.Timeout})
	if err == nil && !isOK(rep.r) && !(rep.r.Kind == resp.KindInteger && rep.r.Int == 0) {
		err = fmt.Errorf("protocol: %s %s: %w", cmdKeyNotify, keyText(key), unexpected(rep.r))
	}
	if err != nil && !had && !errors.Is(err, ErrNotConnected) {
		c.rmu.Lock()
		delete(c.watched, k)
		c.rmu.Unlock()
	}
	return err
}

// KeyNotifyStop ends the registration of key: true when it existed, false
// when it did not (`:0`). The key leaves the reconnect set first, so even
// when the call fails (e.g. ErrNotConnected) it is not re-registered later;
// the store itself forgets registrations when a connection ends.
func (c *Client) KeyNotifyStop(ctx context.Context, key []byte, opts CallOptions) (bool, error) {
	if err := checkKey(cmdKeyNotifyStop, key); err != nil {
		return false, err
	}
	c.rmu.Lock()
	delete(c.watched, string(key))
	c.rmu.Unlock()
	rep, err := c.call(ctx, cmdKeyNotifyStop, key, [][]byte{bKeyNotify, key, bStop}, callOpts{timeout: opts.Timeout})
	if err != nil {
		return false, err
	}
	switch {
	case isOK(rep.r):
		return true, nil
	case rep.r.Kind == resp.KindInteger && rep.r.Int == 0, rep.r.Kind == resp.KindNil:
		return false, nil
	}
	return false, fmt.Errorf("protocol: %s %s: %w", cmdKeyNotifyStop, keyText(key), unexpected(rep.r))
}

func isOK(r resp.Reply) bool { return r.Kind == resp.KindSimple && string(r.Str) == "OK" }
