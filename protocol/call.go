package protocol

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// command names, for error messages.
const (
	cmdGet           = "get"
	cmdSet           = "set"
	cmdDel           = "del"
	cmdVDel          = "vdel"
	cmdKeyNotify     = "keynotify"
	cmdKeyNotifyStop = "keynotify stop"
)

// Request tokens (statestore-protocol.md §5.1).
var (
	bGet       = []byte("GET")
	bSet       = []byte("SET")
	bDel       = []byte("DEL")
	bVDel      = []byte("VDEL")
	bKeyNotify = []byte("KEYNOTIFY")
	bStop      = []byte("STOP")
	bNX        = []byte("NX")
	bNEX       = []byte("NEX")
	bPX        = []byte("PX")
)

var payloadFormatUnspecified byte

// callOpts are the per-request knobs shared by all commands.
type callOpts struct {
	timeout time.Duration
	fence   hlc.HLC // sent as __ft when non-zero
	persist bool    // aio-persistence: true
}

// reply is a decoded response of status 200 (possibly a -ERR reply).
type reply struct {
	r          resp.Reply
	version    hlc.HLC
	hasVersion bool
}

// call publishes one request and waits for its response. It checks the
// response status, protocol version, content type and `__ts` (merged into
// the client clock), and parses the payload; a -ERR reply comes back as a
// *ServiceError. Errors are wrapped with the command and key.
func (c *Client) call(ctx context.Context, cmd string, key []byte, args [][]byte, o callOpts) (rep reply, err error) {
	if obs := c.cfg.Observer; obs != nil {
		start := time.Now()
		defer func() { obs.ObserveRequest(cmd, outcomeOf(err), time.Since(start)) }()
	}
	rep, err = c.roundTrip(ctx, args, o)
	if err != nil {
		return reply{}, fmt.Errorf("protocol: %s %s: %w", cmd, keyText(key), err)
	}
	if rep.r.Kind == resp.KindError {
		return rep, fmt.Errorf("protocol: %s %s: %w", cmd, keyText(key), &ServiceError{Text: string(rep.r.Str)})
	}
	return rep, nil
}

func (c *Client) roundTrip(ctx context.Context, args [][]byte, o callOpts) (reply, error) {
	if c.ctx.Err() != nil {
		return reply{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return reply{}, err
	}
	cn := c.readyConn()
	if cn == nil {
		c.stats.notConnected.Add(1)
		return reply{}, ErrNotConnected
	}
	timeout := o.timeout
	if timeout <= 0 {
		timeout = c.cfg.Timeout
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
		if timeout <= 0 {
			c.stats.timeouts.Add(1)
			return reply{}, context.DeadlineExceeded
		}
	}
	expiry := uint32((timeout + time.Second - 1) / time.Second) // ceil
	expiry = max(expiry, 1)

	ts := c.clock.Tick()
	id := newUUID()
	user := make(paho.UserProperties, 0, 6)
	user = append(user,
		paho.UserProperty{Key: wire.PropSourceID, Value: c.clientID},
		paho.UserProperty{Key: wire.PropTimestamp, Value: ts.String()},
		paho.UserProperty{Key: wire.PropProtVer, Value: wire.ProtocolVersion},
		paho.UserProperty{Key: wire.PropPartition, Value: c.clientID},
	)
	if !o.fence.IsZero() {
		user = append(user, paho.UserProperty{Key: wire.PropFencingToken, Value: o.fence.String()})
	}
	if o.persist {
		user = append(user, paho.UserProperty{Key: wire.PropPersistence, Value: "true"})
	}
	pub := &paho.Publish{
		QoS:     1,
		Topic:   wire.RequestTopic,
		Payload: resp.EncodeRequest(args...),
		Properties: &paho.PublishProperties{
			CorrelationData: id[:],
			ResponseTopic:   c.respTopic,
			ContentType:     wire.ContentType,
			PayloadFormat:   &payloadFormatUnspecified,
			MessageExpiry:   &expiry,
			User:            user,
		},
	}
	if err := checkPacketSize(pub, cn.maxPacket); err != nil {
		return reply{}, err
	}
	if cn.local != nil {
		return c.localRoundTrip(cn, pub, ts.String(), o)
	}

	// Register before publishing: the response may beat the PUBACK.
	ch := make(chan *paho.Publish, 1)
	c.pmu.Lock()
	c.pending[id] = ch
	c.pmu.Unlock()
	defer func() {
		c.pmu.Lock()
		delete(c.pending, id)
		c.pmu.Unlock()
	}()

	// The wait ends on the response, the timeout, the caller's context, the
	// connection going down, or Close (the last two through cn.ctx).
	wctx, cancel := context.WithTimeout(cn.ctx, timeout)
	defer cancel()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
	}

	c.stats.requests.Add(1)
	var p *paho.Publish
	if _, err := cn.cm.Publish(wctx, pub); err != nil {
		select {
		case p = <-ch: // answered although the PUBACK was lost
		default:
			return reply{}, c.waitError(ctx, cn, wctx, timeout, err)
		}
	}
	if p == nil {
		select {
		case p = <-ch:
		case <-wctx.Done():
			return reply{}, c.waitError(ctx, cn, wctx, timeout, nil)
		}
	}
	c.stats.responses.Add(1)

	return c.observed(decodeResponse(p.Properties, p.Payload))
}

// localRoundTrip is roundTrip's end for an in-process store (local.go):
// the request is executed at once and its reply goes through the same
// decoding as a broker's response.
func (c *Client) localRoundTrip(cn *conn, pub *paho.Publish, ts string, o callOpts) (reply, error) {
	if err := cn.ctx.Err(); err != nil {
		c.stats.connectionLost.Add(1)
		return reply{}, context.Cause(cn.ctx)
	}
	ft := ""
	if !o.fence.IsZero() {
		ft = o.fence.String()
	}
	c.stats.requests.Add(1)
	payload, version := cn.local.Do(pub.Payload, ts, ft)
	c.stats.responses.Add(1)
	return c.observed(decodeResponse(localResponse(version), payload))
}

// observed passes a decoded reply on once the client's clock has observed
// its version (a response's version moves the clock on, whichever end
// answered).
func (c *Client) observed(rep reply, err error) (reply, error) {
	if err != nil {
		return reply{}, err
	}
	if rep.hasVersion {
		if err := c.clock.Observe(rep.version); err != nil {
			return reply{}, fmt.Errorf("response version %s: %w", rep.version, err)
		}
	}
	return rep, nil
}

// packetSlack bounds what a request's PUBLISH packet holds besides its
// payload: fixed header, topic, packet id and properties. The largest are
// the response topic and two user properties, each at most a client id
// (1024 bytes, or 2048 as hex in the topic); the rest are a few dozen bytes.
const packetSlack = 16 << 10

// checkPacketSize refuses pub, with a *TooLargeError, when its packet would
// be larger than max (0: no limit). Only a payload within packetSlack of
// the limit costs encoding the packet's header and properties to measure
// it; the payload is never copied.
func checkPacketSize(pub *paho.Publish, max int) error {
	if max <= 0 || len(pub.Payload)+packetSlack <= max {
		return nil
	}
	remaining := 0
	for _, b := range pub.Packet().Buffers() { // variable header, properties, payload
		remaining += len(b)
	}
	size := 1 + vbiLen(remaining) + remaining // + the fixed header
	if size > max {
		return &TooLargeError{Size: size, Max: max}
	}
	return nil
}

// vbiLen is the length of n as an MQTT variable byte integer.
func vbiLen(n int) int {
	l := 1
	for ; n >= 128; n >>= 7 {
		l++
	}
	return l
}

// waitError explains why a call ended without a response. pubErr is the
// error of Publish, if that is where it ended.
func (c *Client) waitError(ctx context.Context, cn *conn, wctx context.Context, timeout time.Duration, pubErr error) error {
	switch {
	case ctx.Err() != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			c.stats.timeouts.Add(1)
		}
		return ctx.Err()
	case c.ctx.Err() != nil:
		return ErrClosed
	case cn.ctx.Err() != nil:
		c.stats.connectionLost.Add(1)
		return context.Cause(cn.ctx)
	case wctx.Err() != nil:
		c.stats.timeouts.Add(1)
		return fmt.Errorf("%w after %v: %w", ErrTimeout, timeout, context.DeadlineExceeded)
	case errors.Is(pubErr, autopaho.ConnectionDownError), errors.Is(pubErr, session.ErrNoConnection):
		c.stats.notConnected.Add(1)
		return ErrNotConnected
	case errors.Is(pubErr, paho.ErrInvalidArguments):
		return fmt.Errorf("publish: %w", pubErr)
	}
	return fmt.Errorf("%w: %w", ErrRejected, pubErr)
}

// decodeResponse checks a response's properties and parses its payload
// (statestore-protocol.md §3, §7). It does not touch the client clock.
func decodeResponse(props *paho.PublishProperties, payload []byte) (reply, error) {
	if props == nil {
		return reply{}, fmt.Errorf("%w: response without properties", ErrUnexpectedReply)
	}
	if err := decodeStatus(props.User); err != nil {
		return reply{}, err
	}
	if ct := props.ContentType; ct != "" && ct != wire.ContentType && !strings.HasPrefix(ct, wire.ContentType+";") {
		return reply{}, fmt.Errorf("%w: content type %q", ErrUnexpectedReply, ct)
	}
	if v, ok := userProp(props.User, wire.PropProtVer); ok {
		if err := checkProtocolVersion(v); err != nil {
			return reply{}, err
		}
	}
	var rep reply
	if ts, ok := userProp(props.User, wire.PropTimestamp); ok {
		v, err := hlc.Parse(ts)
		if err != nil {
			return reply{}, fmt.Errorf("%w: response %s: %w", ErrUnexpectedReply, wire.PropTimestamp, err)
		}
		rep.version, rep.hasVersion = v, true
	}
	r, err := resp.ParseReply(payload)
	if err != nil {
		return reply{}, fmt.Errorf("%w: payload %s: %w", ErrUnexpectedReply, quotePayload(payload), err)
	}
	rep.r = r
	return rep, nil
}

// checkProtocolVersion accepts `1.<minor>`, the only major this client speaks.
func checkProtocolVersion(v string) error {
	major, minor, ok := strings.Cut(v, ".")
	if ok {
		_, err1 := strconv.ParseUint(major, 10, 32)
		_, err2 := strconv.ParseUint(minor, 10, 32)
		ok = err1 == nil && err2 == nil
	}
	if !ok {
		return fmt.Errorf("%w: %s %q is not major.minor", ErrUnexpectedReply, wire.PropProtVer, v)
	}
	if n, _ := strconv.ParseUint(major, 10, 32); n != 1 {
		return fmt.Errorf("%w: %s %q: only major version 1 is supported", ErrUnexpectedReply, wire.PropProtVer, v)
	}
	return nil
}

func unexpected(r resp.Reply) error {
	switch r.Kind {
	case resp.KindInteger:
		return fmt.Errorf("%w: integer %d", ErrUnexpectedReply, r.Int)
	case resp.KindSimple, resp.KindBulk:
		return fmt.Errorf("%w: %s %s", ErrUnexpectedReply, r.Kind, quotePayload(r.Str))
	}
	return fmt.Errorf("%w: %s", ErrUnexpectedReply, r.Kind)
}

// quotePayload quotes at most 64 bytes of b for an error message.
func quotePayload(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "..."
	}
	return strconv.Quote(string(b))
}

// keyText renders a key for errors and logs: quoted, at most 64 bytes.
func keyText(key []byte) string {
	return "key " + quotePayload(key)
}
