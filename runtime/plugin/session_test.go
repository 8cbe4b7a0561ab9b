package plugin

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/internal/testutil"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// current returns the script's process in service and its session.
func current(t testing.TB, s *script) (*proc, *session) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		t.Fatal("no process in service")
	}
	if ss := s.cur.sess; ss != nil {
		if raw := ss.rawc != nil; raw == s.rt.grpcSession {
			t.Fatalf("session on the raw channel: %t, want %t", raw, !s.rt.grpcSession)
		}
	}
	return s.cur, s.cur.sess
}

// sent returns how many events went down ss.
func (ss *session) sent() uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.last
}

// seqs sends the test rule's seq command for from..to and checks each was
// handled.
func seqs(t testing.TB, s *script, h *abitest.Host, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := s.Handle(context.Background(), command("seq", strconv.Itoa(i))); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if _, ok := h.Value("seen/" + strconv.Itoa(i)); !ok {
			t.Fatalf("event %d was handled but its write is missing", i)
		}
	}
}

// TestSessionCarriesEvents: a plugin built with this SDK opens a session,
// and its events and their host calls go down it (not in Handle calls);
// after the process is killed, the new process opens a session of its own.
func TestSessionCarriesEvents(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, logs := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		p1, ss1 := current(t, s)
		if ss1 == nil {
			t.Fatal("the plugin opened no session")
		}
		if strings.Contains(logs.String(), "built before sessions") {
			t.Errorf("a plugin with a session is logged as without:\n%s", logs)
		}
		seqs(t, s, h, 1, 3)
		if n := ss1.sent(); n != 3 {
			t.Errorf("%d events went down the session, want 3", n)
		}
		if err := testutil.Kill(p1.pid); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the killed plugin to be restarted", func() bool { p := s.stats().Pid; return p != 0 && p != p1.pid })
		seqs(t, s, h, 4, 5)
		_, ss2 := current(t, s)
		if ss2 == nil || ss2 == ss1 || ss2.sent() != 2 {
			t.Errorf("the restarted process's session %p (first %p) carried %d events, want a new one carrying 2", ss2, ss1, ss2.sent())
		}
	})
}

// slowHost is an abi.Host whose Get of "slow" answers only when its
// context ends, as a store request that gets no answer.
type slowHost struct{ *abitest.Host }

func (h slowHost) Get(ctx context.Context, key string) (abi.Value, error) {
	if key == "slow" {
		<-ctx.Done()
		return abi.Value{}, ctx.Err()
	}
	return h.Host.Get(ctx, key)
}

// TestSessionSlowHostCall: a host call that gets no answer is bounded by
// the rule's call timeout like the handler itself: the event fails with
// abi.ErrTimeout (whether the plugin's end or the timeout reaches the host
// first; in the second case the process is replaced), and the next event
// runs on a session.
func TestSessionSlowHostCall(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := slowHost{abitest.New()}
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 2 * time.Second})
		p1, ss1 := current(t, s)
		if ss1 == nil {
			t.Fatal("the plugin opened no session")
		}
		errc := make(chan error, 1)
		go func() { errc <- s.Handle(context.Background(), command("get", "slow")) }()
		select {
		case err := <-errc:
			if err == nil { // the plugin's report of the call's TIMEOUT
				if r := ruletest.Reports(h.Host); len(r) != 1 || !strings.HasPrefix(r[0], "get status=TIMEOUT ") {
					t.Errorf("reports %v, want get status=TIMEOUT", r)
				}
			} else {
				wantError(t, err, callHandle, abi.ErrTimeout)
			}
		case <-time.After(testutil.WaitBound):
			t.Fatalf("Handle still waits for the host call %v after its 2s timeout", testutil.WaitBound)
		}
		seqs(t, s, h.Host, 1, 1)
		p2, ss2 := current(t, s)
		if ss2 == nil || (p2 == p1) != (ss2 == ss1) || ss2.sent() != map[bool]uint64{true: 2, false: 1}[p2 == p1] {
			t.Errorf("after the timeout: process %d (was %d), session %p (was %p) carried %d events", p2.pid, p1.pid, ss2, ss1, ss2.sent())
		}
	})
}

// TestSessionCancel: when the caller's context ends while the plugin holds
// an event, Handle returns the context's error and the process stays; the
// next events go down the same session, the held handler's end (it never
// comes) being no answer to them.
func TestSessionCancel(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: time.Minute})
		p1, ss := current(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.Handle(ctx, command("hold")) }()
		testutil.WaitFor(t, "the plugin to hold the event", func() bool { _, ok := h.Value("inflight"); return ok })
		cancel()
		err := <-errc
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Handle after cancel: %v, want context.Canceled", err)
		}
		seqs(t, s, h, 1, 3)
		if p2, ss2 := current(t, s); p2 != p1 || ss2 != ss || ss.sent() != 4 {
			t.Errorf("process %d (was %d), %d events on the first session; want the same process and session, 4 events", p2.pid, p1.pid, ss.sent())
		}
		if st := s.stats(); st.Starts != 1 || st.Exits != 0 || st.Lost != 0 {
			t.Errorf("stats %+v, want one start, no exit, nothing lost", st)
		}
	})
}

// TestSessionCallAfterEvent: a goroutine of the handler that calls the host
// after its event ended reaches the Host service (outside the session), as
// it did before sessions.
func TestSessionCallAfterEvent(t *testing.T) {
	forTransports(t, testSessionCallAfterEvent)
}

func testSessionCallAfterEvent(t *testing.T) {
	for _, unary := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "unary"}[unary], func(t *testing.T) {
			h := abitest.New()
			s := inProcessScriptWith(t, h, unary)
			if err := s.Handle(context.Background(), command("late", "k")); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "the late write", func() bool {
				return slices.Contains(h.Logs(), abitest.LogLine{Level: abi.LevelInfo, Msg: "late OK"})
			})
			if v, _ := h.Value("k"); string(v) != "late" {
				t.Errorf("k = %q, want late", v)
			}
		})
	}
}

// inProcessScriptWith starts the in-process test rule, on a session unless
// unary.
func inProcessScriptWith(t *testing.T, h abi.Host, unary bool) *script {
	t.Helper()
	s, _, _ := inProcessScript(t, h, abi.Limits{CallTimeout: 10 * time.Second}, func(r *Runtime) { r.unaryOnly = unary })
	if _, ss := current(t, s); (ss == nil) != unary {
		t.Fatalf("session %p, want one: %t", ss, !unary)
	}
	return s
}

// TestSessionCoversHost: the session's HostCall has one verb per Host
// method (so per ABI verb), and the host serves each of them.
func TestSessionCoversHost(t *testing.T) {
	verbs := (&pb.HostCall{}).ProtoReflect().Descriptor().Oneofs().ByName("verb").Fields()
	var names []string
	srv := &hostServer{h: abitest.New(), timeout: time.Second}
	for i := range verbs.Len() {
		fd := verbs.Get(i)
		names = append(names, string(fd.Name()))
		call := (&pb.HostCall{Id: 7}).ProtoReflect()
		call.Set(fd, protoreflect.ValueOfMessage(call.NewField(fd).Message()))
		r := srv.serve(context.Background(), call.Interface().(*pb.HostCall))
		if r.GetId() != 7 || r.GetResponse() == nil || strings.Contains(string(r.GetResult().GetMessage()), "unknown verb") {
			t.Errorf("%s: reply %v", fd.Name(), r)
		}
	}
	if want := allVerbs(); !slices.Equal(names, want) {
		t.Errorf("HostCall verbs %v, ABI verbs %v", names, want)
	}
	if r := srv.serve(context.Background(), &pb.HostCall{Id: 8}); !strings.Contains(string(r.GetResult().GetMessage()), "unknown verb") {
		t.Errorf("a call without a verb: reply %v", r)
	}
}

// TestSessionConcurrentCalls: a handler whose goroutines call the host all
// at once gets every call answered, each with its own reply (on the raw
// channel they share the reading of the socket), and the next event runs
// as usual.
func TestSessionConcurrentCalls(t *testing.T) {
	forAllTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		for range 3 {
			if got, want := run(t, s, h, command("concurrent", "16")), `concurrent status=OK msg="" ok=16`; got != want {
				t.Fatalf("report %s, want %s", got, want)
			}
		}
		seqs(t, s, h, 1, 2)
	})
}

// TestSessionCancelReachesHandler: when the caller stops waiting for an
// event whose handler makes no host call (so, on the raw channel, nobody
// in the plugin reads the socket), the handler's ctx still ends, and the
// events after it are handled by the same process.
func TestSessionCancelReachesHandler(t *testing.T) {
	forAllTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: time.Minute})
		p1 := s.stats().Pid
		cancelHeldEvent(t, s, h)
		seqs(t, s, h, 1, 3)
		if st := s.stats(); st.Pid != p1 || st.Starts != 1 || st.Lost != 0 {
			t.Errorf("stats %+v, want the first process (pid %d) still, nothing lost", st, p1)
		}
	})
}

// gateHost is an abi.Host whose Get of "gate" answers only once "open" is
// set (or its ctx ends), and whose Get of "gate/waiting" finds a value
// once a Get of "gate" waits.
type gateHost struct {
	*abitest.Host
	waiting, open chan struct{}
	once          *sync.Once
}

func newGateHost() gateHost {
	return gateHost{Host: abitest.New(), waiting: make(chan struct{}), open: make(chan struct{}), once: &sync.Once{}}
}

func (h gateHost) Get(ctx context.Context, key string) (abi.Value, error) {
	switch key {
	case "gate":
		select {
		case <-h.waiting:
		default:
			close(h.waiting)
		}
		select {
		case <-h.open:
			return abi.Value{Data: []byte("opened")}, nil
		case <-ctx.Done():
			return abi.Value{}, abi.Errorf(abi.StatusTimeout, "gate: %v", ctx.Err())
		}
	case "gate/waiting":
		select {
		case <-h.waiting:
			return abi.Value{Data: []byte("yes")}, nil
		default:
		}
	}
	return h.Host.Get(ctx, key)
}

func (h gateHost) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	if key == "open" {
		h.once.Do(func() { close(h.open) })
	}
	return h.Host.Set(ctx, key, value, opts)
}

// TestSessionCallBehindBlockedCall: while a handler's call waits in the
// host (here, until another call of the same handler opens it), the
// handler's other calls are still served. On the raw channel the first
// call goes alone (HostCall.alone) and the host serves it before reading
// on; the others must then travel on the stream, or they would wait behind
// it until the event's deadline.
func TestSessionCallBehindBlockedCall(t *testing.T) {
	forAllTransports(t, func(t *testing.T) {
		h := newGateHost()
		s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		if got, want := run(t, s, h.Host, command("gate")), `gate status=OK msg=""`; got != want {
			t.Fatalf("report %s, want %s", got, want)
		}
	})
}

// cancelHeldEvent sends a "waitcancel" event, cancels its Handle once the
// plugin holds it, and waits for Handle to return context.Canceled and for
// the handler to log that its ctx ended.
func cancelHeldEvent(t *testing.T, s *script, h *abitest.Host) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Handle(ctx, command("waitcancel")) }()
	testutil.WaitFor(t, "the plugin to hold the event", func() bool { _, ok := h.Value("inflight"); return ok })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle after cancel: %v, want context.Canceled", err)
	}
	testutil.WaitFor(t, "the handler to see its ctx end", func() bool {
		return slices.Contains(h.Logs(), abitest.LogLine{Level: abi.LevelInfo, Msg: "waitcancel context canceled"})
	})
}
