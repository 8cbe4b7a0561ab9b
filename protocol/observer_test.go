package protocol

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu  sync.Mutex
	got []string // "command outcome"
}

func (r *recorder) ObserveRequest(cmd string, o Outcome, took time.Duration) {
	if took < 0 {
		panic("negative duration")
	}
	r.mu.Lock()
	r.got = append(r.got, cmd+" "+string(o))
	r.mu.Unlock()
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// The observer sees each request once, with its command and how it ended:
// a reply, a -ERR reply, a request timing out and one failing fast while
// disconnected; Connected follows the connection going and coming back.
func TestObserverOutcomes(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	rec := &recorder{}
	p := testnet.NewProxy(t, s.addr)
	c := connect(t, p.Addr(), func(cfg *Config) { cfg.Observer = rec })
	if !c.Connected() {
		t.Fatal("Connected() = false after AwaitConnection")
	}
	ctx := context.Background()
	if _, err := c.Set(ctx, []byte("k"), []byte("v"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, []byte("k"), CallOptions{}); err != nil {
		t.Fatal(err)
	}
	s.setHandler(func(req packets.Packet) []packets.Packet {
		return []packets.Packet{response(req, "-ERR the quota has been exceeded\r\n", "__stat", "200")}
	})
	if _, err := c.Set(ctx, []byte("k"), []byte("v"), SetOptions{}); err == nil {
		t.Fatal("SET answered -ERR: want an error")
	}
	s.setHandler(func(packets.Packet) []packets.Packet { return nil }) // never answers
	if _, err := c.Del(ctx, []byte("k"), DelOptions{Timeout: 50 * time.Millisecond}); err == nil {
		t.Fatal("unanswered DEL: want an error")
	}
	want := []string{"set ok", "get ok", "set service_error", "del timeout"}
	if got := rec.list(); !equalStrings(got, want) {
		t.Fatalf("observed %q, want %q", got, want)
	}
	p.Cut()
	testutil.WaitFor(t, "Connected() false once the connection is cut", func() bool { return !c.Connected() })
	if _, err := c.Get(ctx, []byte("k"), CallOptions{}); err == nil {
		t.Fatal("GET while disconnected: want an error")
	}
	if got := rec.list(); got[len(got)-1] != "get not_connected" {
		t.Fatalf("last observed %q, want \"get not_connected\"", got[len(got)-1])
	}
	p.Heal()
	testutil.WaitFor(t, "Connected() true once the connection heals", c.Connected)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
