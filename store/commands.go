package store

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

// Access is what a state store command does to its key (§9 step 7).
type Access uint8

const (
	Read  Access = 1 << iota // GET, KEYNOTIFY
	Write                    // SET, DEL, VDEL
)

// MaxRequest is the largest request the store is built for, in bytes: a
// request's key and value fit in it, and the journal's records are sized
// for it. The broker takes no larger MQTT packet (broker.MaxPacketSize).
const MaxRequest = 4 << 20

// Request is what the executor needs from one request.
type Request struct {
	Payload []byte
	TS, FT  *string // user properties __ts / __ft; nil when absent
	// observer returns the registering connection for KEYNOTIFY; ClientID is
	// the MQTT client id of the requester.
	ClientID string
	Observer func() Observer
	// Allow decides whether the requester may read (GET, KEYNOTIFY) or
	// write (SET, DEL, VDEL) a key (§9 step 7); nil allows everything.
	Allow func(m Access, key []byte) bool
	// MaxReplyBytes bounds a SCAN reply: the largest the requester takes
	// (its Maximum Packet Size, less the response's own bytes); 0 for the
	// store's default (scan.go).
	MaxReplyBytes int
}

// allowed applies req.allow.
func (req Request) allowed(m Access, key []byte) bool {
	return req.Allow == nil || req.Allow(m, key)
}

// Reply is the outcome of one request: the RESP3 payload (never empty) and
// the version to send as __ts (only when hasVersion, §10.5).
type Reply struct {
	Payload    []byte
	Version    hlc.HLC
	HasVersion bool
	Pos        uint64 // journal position to be durable before it is sent
}

func errReply(text string) Reply { return Reply{Payload: resp.AppendError(nil, text)} }

func versioned(payload []byte, v hlc.HLC) Reply {
	return Reply{Payload: payload, Version: v, HasVersion: true}
}

// arity bounds of §5.1 per command.
var arity = map[string][2]int{
	"SET":       {3, 6},
	"GET":       {2, 2},
	"DEL":       {2, 2},
	"VDEL":      {3, 3},
	"KEYNOTIFY": {2, 3},
	"SCAN":      {2, 3},
}

// Execute runs one request against the store and returns its reply, whose
// Pos is the journal position the reply must wait for (the journal's end,
// so that it reports no state a crash could undo; 0 in memory). It never
// panics on any input and always returns a well-formed reply.
func (s *Store) Execute(req Request) Reply {
	r := s.execute(req)
	r.Pos = s.replyPos()
	return r
}

func (s *Store) execute(req Request) Reply {
	args, err := resp.ParseRequest(req.Payload)
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
	case "SCAN":
		var token []byte
		if len(args) == 3 {
			token = args[2]
		}
		return s.execScan(req, key, token)
	case "GET":
		if !req.allowed(Read, key) {
			return errReply(wire.ErrTextNotAuthorized)
		}
		s.observeTS(req.TS)
		value, v, ok := s.get(key)
		if !ok {
			return Reply{Payload: resp.Nil}
		}
		return versioned(resp.AppendBulk(make([]byte, 0, len(value)+16), value), v)
	case "DEL", "VDEL":
		var match []byte
		if cmd == "VDEL" {
			match = args[2]
		}
		if !req.allowed(Write, key) {
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
		if !stop && !req.allowed(Read, key) {
			return errReply(wire.ErrTextNotAuthorized)
		}
		s.observeTS(req.TS)
		if !stop {
			if err := s.keyNotify(req.Observer(), key); err != nil {
				return storeErrReply(err)
			}
			return Reply{Payload: resp.OK}
		}
		if s.keyNotifyStop(req.ClientID, key) {
			return Reply{Payload: resp.OK}
		}
		return Reply{Payload: resp.Zero}
	}
}

func (s *Store) execSet(req Request, key, value []byte, opts [][]byte) Reply {
	a := setArgs{key: key, value: value, src: req.ClientID}
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
	if !req.allowed(Write, key) {
		return errReply(wire.ErrTextNotAuthorized)
	}
	if req.TS == nil {
		return errReply(wire.ErrTextTimestampMissing)
	}
	ts, err := hlc.Parse(*req.TS)
	if err != nil {
		return errReply(wire.ErrTextTimestampMalformed)
	}
	if hlc.CheckSkew(ts, s.now()) != nil {
		return errReply(wire.ErrTextTimestampSkew)
	}
	a.ts = ts
	ft, r, ok := s.fencingToken(req.FT)
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

func (s *Store) execDel(req Request, key, match []byte) Reply {
	ft, r, ok := s.fencingToken(req.FT)
	if !ok {
		return r
	}
	s.observeTS(req.TS)
	n, v, err := s.del(key, match, ft, req.ClientID)
	switch {
	case err != nil:
		return storeErrReply(err)
	case n == 0:
		return Reply{Payload: resp.Zero}
	case n < 0:
		return versioned(resp.NotApplied, v)
	}
	return versioned(resp.One, v)
}

// fencingToken validates an optional __ft (E11, E3). ok=false means reply r.
func (s *Store) fencingToken(p *string) (ft *hlc.HLC, r Reply, ok bool) {
	if p == nil {
		return nil, Reply{}, true
	}
	h, err := hlc.Parse(*p)
	if err != nil {
		return nil, errReply(wire.ErrTextTimestampMalformed), false
	}
	if hlc.CheckSkew(h, s.now()) != nil {
		return nil, errReply(wire.ErrTextFencingTokenSkew), false
	}
	return &h, Reply{}, true
}

// observeTS folds a valid, in-skew __ts of a non-SET command into the server
// clock (§2: accepted there, never a reason to fail).
func (s *Store) observeTS(p *string) {
	if p == nil {
		return
	}
	if h, err := hlc.Parse(*p); err == nil {
		_ = s.clock.Observe(h)
	}
}

func storeErrReply(err error) Reply {
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
