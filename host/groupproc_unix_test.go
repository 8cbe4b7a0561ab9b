//go:build unix

package host

import (
	"context"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol"
)

// resume continues the process p if it was stopped (SIGSTOP).
func resume(p *os.Process) { _ = p.Signal(syscall.SIGCONT) }

// A host process of the group is stopped with SIGSTOP while it handles an
// event, for longer than the ttl: the other hosts take its rules over and
// handle the event again. After SIGCONT its write for that event does not
// land (its lease has lapsed: refused before it is sent, or by the store),
// and the output key shows only the new owner's write.
func TestGroupSIGSTOPLateWriteRefused(t *testing.T) {
	c := newCluster(t, 30, groupTestTTL)
	ms := []*member{c.start(), c.start()}
	p := c.startGroupHelper()
	waitFor(t, "3 members, the process owning some rules", func() bool {
		for _, m := range ms {
			if gs, _ := m.host.Group(); len(gs.Members) != 3 {
				return false
			}
		}
		own := c.owners()
		n := 0
		for _, r := range c.rules {
			n += len(own[r])
		}
		return n < 30 && c.leaseHolder(t, c.rules[0]) != ""
	})
	var victim string
	waitFor(t, "a rule the process owns", func() bool {
		own := c.owners()
		for _, r := range c.rules {
			if len(own[r]) == 0 && strings.HasPrefix(c.leaseHolder(t, r), "group-helper:") {
				victim = r
				return true
			}
		}
		return false
	})
	if _, err := c.user.Set(context.Background(), []byte("in/"+victim), []byte("stop"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if line := p.line(t); line != "handling in/"+victim {
		t.Fatalf("group helper host: %q", line)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if !c.waitHandled(victim, "stop", time.Minute) {
		t.Fatal("no other host took the stopped host's rule over")
	}
	t.Logf("rule of the stopped host handled elsewhere %v after SIGSTOP (ttl %v)", time.Since(stopped).Round(time.Millisecond), groupTestTTL)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	res := p.line(t)
	if !strings.HasPrefix(res, "refused") {
		t.Fatalf("the stopped host's late write: %q, want refused", res)
	}
	t.Logf("the stopped host's late write: %s", res)
	got, err := c.user.Get(context.Background(), []byte("out/"+victim), protocol.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := string(got.Value); v == "stop@p" || !strings.HasPrefix(v, "stop@") {
		t.Fatalf("out/%s = %q, want the new owner's write", victim, v)
	}
}
