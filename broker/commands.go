package broker

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// This file turns a request payload plus its __ts/__ft properties into a
// reply payload (statestore-protocol.md §5-§9), following the validation
// pipeline of §9: framing, command, arity, empty key, options,
// authorization, __ts, __ft, then the store.

// request is what the executor needs from one MQTT request.
type request struct {
	payload []byte
	ts, ft  *string // user properties __ts / __ft; nil when absent
	// observer returns the registering connection for KEYNOTIFY; clientID is
	// the MQTT client id of the requester.
	clientID string
	observer func() observer
	// allow decides whether the requester may read (GET, KEYNOTIFY) or
	// write (SET, DEL, VDEL) a key (§9 step 7); nil allows everything.
	allow func(m keyMethod, key []byte) bool
}

// allowed applies req.allow.
func (req request) allowed(m keyMethod, key []byte) bool {
	return req.allow == nil || req.allow(m, key)
}

// reply is the outcome of one request: the RESP3 payload (never empty) and
// the version to send as __ts (only when hasVersion, §10.5).
type reply struct {
	payload    []byte
	version    hlc.HLC
	hasVersion bool
	pos        uint64 // journal position to be durable before it is sent
}

func errReply(text string) reply { return reply{payload: resp.AppendError(nil, text)} }

func versioned(payload []byte, v hlc.HLC) reply {
	return reply{payload: payload, version: v, hasVersion: true}
}

// arity bounds of §5.1 per command.
var arity = map[string][2]int{
	"SET":       {3, 6},
	"GET":       {2, 2},
	"DEL":       {2, 2},
	"VDEL":      {3, 3},
	"KEYNOTIFY": {2, 3},
}

// execute runs one request against the store. It never panics on any input
// and always returns a well-formed reply.
func (s *store) execute(req request) reply {
	args, err := resp.ParseRequest(req.payload)
	if err != nil {
		return errReply(wire.ErrTextSyntax)
	}
	cmd := upper(args[0])
	bounds, known := arity[cmd]
	if !known {
		return errReply(wire.ErrTextUnknownCommand)
	}
	if len(args) < bounds[0] || len(args) > bounds[1] {
		return errReply(wire.ErrTextWrongNumberOfArgs)
	}
	key := args[1]
	if len(key) == 0 {
		return errReply(wire.ErrTextKeyLengthZero)
	}
	switch cmd {
	case "SET":
		return s.execSet(req, key, args[2], args[3:])
	case "GET":
		if !req.allowed(keyRead, key) {
			return errReply(wire.ErrTextNotAuthorized)
		}
		s.observeTS(req.ts)
		value, v, ok := s.get(key)
		if !ok {
			return reply{payload: resp.Nil}
		}
		return versioned(resp.AppendBulk(make([]byte, 0, len(value)+16), value), v)
	case "DEL", "VDEL":
		var match []byte
		if cmd == "VDEL" {
			match = args[2]
		}
		if !req.allowed(keyWrite, key) {
			return errReply(wire.ErrTextNotAuthorized)
		}
		return s.execDel(req, key, match)
	default: // KEYNOTIFY
		stop := false
		if len(args) == 3 {
			switch upper(args[2]) {
			case "STOP":
				stop = true
			case "GET": // §5.1: accepted as a no-op
			default:
				return errReply(wire.ErrTextSyntax)
			}
		}
		// STOP only removes the requester's own registration: allowed
		// even for a key it may no longer read.
		if !stop && !req.allowed(keyRead, key) {
			return errReply(wire.ErrTextNotAuthorized)
		}
		s.observeTS(req.ts)
		if !stop {
			if err := s.keyNotify(req.observer(), key); err != nil {
				return storeErrReply(err)
			}
			return reply{payload: resp.OK}
		}
		if s.keyNotifyStop(req.clientID, key) {
			return reply{payload: resp.OK}
		}
		return reply{payload: resp.Zero}
	}
}

func (s *store) execSet(req request, key, value []byte, opts [][]byte) reply {
	a := setArgs{key: key, value: value, src: req.clientID}
	seenCond, seenPX := false, false
	for i := 0; i < len(opts); i++ {
		switch upper(opts[i]) {
		case "NX", "NEX":
			if seenCond {
				return errReply(wire.ErrTextSyntax)
			}
			seenCond = true
			a.cond = ifAbsent
			if len(opts[i]) == 3 {
				a.cond = ifAbsentOrEqual
			}
		case "PX":
			if seenPX || i+1 >= len(opts) {
				return errReply(wire.ErrTextSyntax)
			}
			seenPX = true
			ms, ok := parseMillis(opts[i+1])
			if !ok {
				return errReply(wire.ErrTextSyntax)
			}
			a.px = time.Duration(ms) * time.Millisecond
			i++
		default:
			return errReply(wire.ErrTextSyntax)
		}
	}
	if !req.allowed(keyWrite, key) {
		return errReply(wire.ErrTextNotAuthorized)
	}
	if req.ts == nil {
		return errReply(wire.ErrTextTimestampMissing)
	}
	ts, err := hlc.Parse(*req.ts)
	if err != nil {
		return errReply(wire.ErrTextTimestampMalformed)
	}
	if hlc.CheckSkew(ts, s.now()) != nil {
		return errReply(wire.ErrTextTimestampSkew)
	}
	a.ts = ts
	ft, r, ok := s.fencingToken(req.ft)
	if !ok {
		return r
	}
	a.ft = ft
	applied, v, err := s.set(a)
	if err != nil {
		return storeErrReply(err)
	}
	if !applied {
		return versioned(resp.NotApplied, v)
	}
	return versioned(resp.OK, v)
}

func (s *store) execDel(req request, key, match []byte) reply {
	ft, r, ok := s.fencingToken(req.ft)
	if !ok {
		return r
	}
	s.observeTS(req.ts)
	n, v, err := s.del(key, match, ft, req.clientID)
	switch {
	case err != nil:
		return storeErrReply(err)
	case n == 0:
		return reply{payload: resp.Zero}
	case n < 0:
		return versioned(resp.NotApplied, v)
	}
	return versioned(resp.One, v)
}

// fencingToken validates an optional __ft (E11, E3). ok=false means reply r.
func (s *store) fencingToken(p *string) (ft *hlc.HLC, r reply, ok bool) {
	if p == nil {
		return nil, reply{}, true
	}
	h, err := hlc.Parse(*p)
	if err != nil {
		return nil, errReply(wire.ErrTextTimestampMalformed), false
	}
	if hlc.CheckSkew(h, s.now()) != nil {
		return nil, errReply(wire.ErrTextFencingTokenSkew), false
	}
	return &h, reply{}, true
}

// observeTS folds a valid, in-skew __ts of a non-SET command into the server
// clock (§2: accepted there, never a reason to fail).
func (s *store) observeTS(p *string) {
	if p == nil {
		return
	}
	if h, err := hlc.Parse(*p); err == nil {
		_ = s.clock.Observe(h)
	}
}

func storeErrReply(err error) reply {
	switch {
	case errors.Is(err, errFenceRequired):
		return errReply(wire.ErrTextMissingFencingToken)
	case errors.Is(err, errFenceLower):
		return errReply(wire.ErrTextFencingTokenLower)
	case errors.Is(err, errQuota):
		return errReply(wire.ErrTextQuotaExceeded)
	case errors.Is(err, hlc.ErrSkew):
		return errReply(wire.ErrTextTimestampSkew)
	case errors.Is(err, hlc.ErrMalformed):
		return errReply(wire.ErrTextTimestampMalformed)
	case errors.Is(err, errNotPersisted):
		return errReply(errTextNotPersisted)
	}
	return errReply("internal error: " + err.Error()) // unreachable: every store error is mapped above
}

// parseMillis accepts 1*DIGIT, optionally followed by a decimal fraction
// that is truncated (.NET may send "1.5", §5.1). The result must be >= 1 and
// fit int64 milliseconds; it is capped at maxPX.
func parseMillis(b []byte) (int64, bool) {
	if dot := bytes.IndexByte(b, '.'); dot >= 0 {
		frac := b[dot+1:]
		if len(frac) == 0 || !allDigits(frac) {
			return 0, false
		}
		b = b[:dot]
	}
	if len(b) == 0 || !allDigits(b) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 1 {
		return 0, false
	}
	return min(n, maxPX), true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// upper returns the ASCII upper case of a short token ("" for long ones, so a
// huge argv[0] costs nothing and matches no command).
func upper(b []byte) string {
	if len(b) > len("KEYNOTIFY") {
		return ""
	}
	var buf [len("KEYNOTIFY")]byte
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	return string(buf[:len(b)])
}
