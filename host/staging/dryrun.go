// Package staging is where a dry run and a canary's shadow version stage their
// writes instead of sending them: a copy-on-write layer over the real store,
// on the store engine in process, and the report of each write (Write).
package staging

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// A dry run (host.Config.DryRun) runs the rules on live notifications without
// changing the store. What a rule would write is staged in a layer over the
// store (layer.go), one per host and shared by its rules as the store is:
//
//   - set, del and vdel are checked as usual (permissions, sizes), then made
//     on the layer, which copies the key from the store first and holds it
//     from then on: the state store's semantics (NX/NEX, not found, value
//     differs, versions, fencing, expiry) are package store's, in process;
//     each write is reported, staged or refused, and never sent;
//   - get sees the staged writes of every rule of the host, then the store;
//     a staged set with a ttl reads as absent once the ttl has passed (on
//     the host's clock);
//   - lock and unlock are staged writes of the lock key (SET NEX, VDEL): a
//     lock held in the store by anyone, or staged by another rule, is BUSY
//     at once (a dry run does not wait); a staged lock never expires (the
//     host would renew it) and is never lost; a write fenced with a lock is
//     staged when the rule holds the lock in the layer, and carries its
//     token, which the layer's store checks as the real one would;
//   - timers work, but are kept in the layer only (the host's reserved keys
//     are the layer's own): a dry run starts with no timers, and leaves
//     those of a real run untouched;
//   - staged writes produce no notifications: no rule is notified of
//     another's staged write (a chain of rules stops at the first), and a
//     staged ttl ends without a DELETE event.

// Write is a write a rule made during a dry run: staged in the
// layer, or refused, and never sent to the store.
type Write struct {
	Rule  string
	Op    string // SET, DEL, VDEL, LOCK or UNLOCK
	Key   string
	Value []byte        // SET: the value; VDEL: the value compared; LOCK, UNLOCK: the holder
	TTL   time.Duration // SET: its expiry; LOCK: the lease's (a staged lock does not expire)
	Cond  string        // NX or NEX
	Fence string        // the lock the write is fenced with
	// Err is why the write was refused (condition not met, value differs,
	// lock busy or not held, fencing); empty when it was staged.
	Err string
	// Note says why a harmless write changed nothing: a DEL or VDEL of a
	// key that is absent ("nothing to delete"). It is no failure: the rule
	// gets NOT_FOUND, as from the store, and a real run would do the same.
	Note string
	// Cause is the event the rule was handling; zero for a write outside a
	// handler (at load, or from a plugin's own goroutine).
	Cause provenance.Cause
}

// String is the write as one line: `dry-run: SET hvac1/target "28" (rule
// thermostat.lua, event SET thermostat1/setPoint v=...)`.
func (w Write) String() string {
	var b strings.Builder
	b.WriteString("dry-run: ")
	b.WriteString(w.Op)
	b.WriteString(" ")
	b.WriteString(w.Key)
	if w.Op == "SET" || w.Op == "VDEL" {
		b.WriteString(" " + strconv.Quote(string(w.Value)))
	}
	if w.Cond != "" {
		b.WriteString(" " + w.Cond)
	}
	if w.TTL > 0 {
		b.WriteString(" PX " + w.TTL.String())
	}
	if w.Fence != "" {
		b.WriteString(" fenced by " + strconv.Quote(w.Fence))
	}
	b.WriteString(" (rule " + w.Rule)
	if w.Cause.Op != "" {
		b.WriteString(", event " + w.Cause.Op + " " + w.Cause.Key)
		if w.Cause.Version != "" {
			b.WriteString(" v=" + w.Cause.Version)
		}
	} else {
		b.WriteString(", outside a handler")
	}
	b.WriteString(")")
	switch {
	case w.Err != "":
		b.WriteString(": not staged: " + w.Err)
	case w.Note != "":
		b.WriteString(": " + w.Note)
	}
	return b.String()
}

// Staging is where a dry run (one for the host) or a canary's shadow (one
// per canary, canary.go) stages writes: a layer over the store, and where
// each write is reported.
type Staging struct {
	*layer
	report func(Write)
	wmu    sync.Mutex // one write at a time: its fence and its staging
}

// NewStaging returns a staging over the store real, reporting to report;
// keys under private (the host's reserved prefix: a dry run's timers) are
// the layer's own. See newLayer. Close it to stop its layer's client.
func NewStaging(real realStore, nowMs func() int64, private string, log *slog.Logger, report func(Write)) (*Staging, error) {
	l, err := newLayer(real, nowMs, private, log)
	if err != nil {
		return nil, err
	}
	return &Staging{layer: l, report: report}, nil
}

// StageFunc makes a write on st (the layer) with the fencing token of the
// lock it is fenced with, as a binding's write makes it on the store.
type StageFunc func(st StagedStore, token hlc.HLC) (version string, deleted bool, err error)

// Write stages w (SET, DEL, VDEL, LOCK or UNLOCK) through send, fenced with
// the lock w.Fence held by holder in the layer, and reports it: staged,
// refused (w.Err), or a harmless delete of an absent key (w.Note, with the
// error NOT_FOUND the rule gets from the store too). An error reading the
// store is the rule's and is not reported.
func (s *Staging) Write(ctx context.Context, w Write, holder string, send StageFunc) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	token, err := s.fence(ctx, w, holder)
	if err != nil {
		return s.refuse(w, err)
	}
	if err := s.hold(ctx, []byte(w.Key)); err != nil {
		return status.StoreError(err)
	}
	_, _, err = send(s.layer, token)
	switch {
	case err == nil:
		s.report(w)
	case abi.StatusOf(err) == abi.StatusNotFound && (w.Op == "DEL" || w.Op == "VDEL"):
		w.Note = "nothing to delete (not found)" // the store would answer the same, changing nothing
		s.report(w)
	default:
		return s.refuse(w, err)
	}
	return err
}

// refuse reports w as not staged, for err, and returns err.
func (s *Staging) refuse(w Write, err error) error {
	w.Err = err.Error()
	s.report(w)
	return err
}

// fence returns the token of the lock w is fenced with (zero: none), which
// holder must hold in the layer.
func (s *Staging) fence(ctx context.Context, w Write, holder string) (hlc.HLC, error) {
	if w.Fence == "" {
		return hlc.HLC{}, nil
	}
	if s.holds(w.Fence) {
		res, err := s.Get(ctx, []byte(w.Fence), protocol.CallOptions{})
		if err != nil {
			return hlc.HLC{}, status.StoreError(err)
		}
		if res.Found && string(res.Value) == holder {
			return res.Version, nil
		}
	}
	return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %q: fenced with lock %q, which rule %s does not hold", strings.ToLower(w.Op), w.Key, w.Fence, w.Rule)
}

// Lock stages a rule's lock w (w.Op LOCK, w.Value the rule's holder): its
// key set to the holder, NEX, without expiry. The token is its version.
func (s *Staging) Lock(ctx context.Context, w Write) (string, error) {
	if w.TTL < time.Millisecond {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be at least 1 ms", w.Key)
	}
	var token string
	err := s.Write(ctx, w, "", func(st StagedStore, _ hlc.HLC) (string, bool, error) {
		res, err := st.Set(ctx, []byte(w.Key), w.Value, protocol.SetOptions{Condition: protocol.CondNEX})
		if err != nil {
			return "", false, status.StoreError(err)
		}
		if !res.Applied {
			return "", false, abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", w.Key)
		}
		token = res.Version.String()
		return token, false, nil
	})
	return token, err
}

// Unlock stages a rule's unlock w (w.Op UNLOCK, w.Value the rule's holder):
// a VDEL of the holder.
func (s *Staging) Unlock(ctx context.Context, w Write) error {
	err := s.Write(ctx, w, "", func(st StagedStore, _ hlc.HLC) (string, bool, error) {
		n, err := st.VDel(ctx, []byte(w.Key), w.Value, protocol.DelOptions{})
		return "", err == nil && n == 1, status.DeleteResult("unlock", w.Key, n, err)
	})
	if code := abi.StatusOf(err); code == abi.StatusNotFound || code == abi.StatusNotApplied {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held by this rule", w.Key)
	}
	return err
}

// CondName names an abi condition in a Write.
func CondName(c abi.Condition) string {
	switch c {
	case abi.CondNX:
		return "NX"
	case abi.CondNEX:
		return "NEX"
	}
	return ""
}
