//go:build unix

package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// ssrunProc is an `ssrun run` process of the test.
type ssrunProc struct {
	cmd *exec.Cmd
	out *testutil.Buffer // stdout and stderr (the log)
}

// startSSRun runs `ssrun run DIR` (the binary built from cmd/ssrun) on the
// broker at addr as clientID, with the Lua rule src as holder.lua, and waits
// until the rule is loaded. The process is ended (continued first, should the
// test have stopped it) when the test ends.
func startSSRun(t *testing.T, addr, clientID string, src []byte) *ssrunProc {
	t.Helper()
	bin, err := e2eDir.Exe("ssrun", "github.com/ssrun/ssrun/cmd/ssrun")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "holder.lua"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &ssrunProc{out: &testutil.Buffer{}}
	p.cmd = exec.Command(bin, "run", dir, "--broker", addr, "--client-id", clientID, "--log-level", "debug")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
			t.Errorf("ssrun %s did not stop on SIGTERM; killed", clientID)
		}
		t.Logf("ssrun %s output:\n%s", clientID, p.out)
	})
	waitFor(t, "ssrun "+clientID+" loads its rule", func() bool {
		return strings.Contains(p.out.String(), "ssrun run: 1 rule(s)")
	})
	return p
}

func (p *ssrunProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v: %v", sig, err)
	}
}

// The paused holder, end to end with two host processes. Host a holds the
// lease (ttl 1 s) and has written the guarded key; the test stops a
// (SIGSTOP) until the lease has expired in the store; host b takes the
// lease and has not written the key yet, so the store would still accept
// a's old token there. While a is stopped its next command is queued; when
// it continues, its fenced write must fail locally with LOCK_LOST, and the
// key keeps the state b found.
func TestLockPausedHolderWriteRefusedLocally(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "lockpause", "holder.lua"))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t)
	user := newClient(t, b.Addr())
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	get := func(key string) protocol.GetResult {
		t.Helper()
		res, err := user.Get(ctx(), []byte(key), protocol.CallOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return res
	}
	command := func(who, cmd string) {
		t.Helper()
		if _, err := user.Set(ctx(), []byte("pause/cmd/"+who), []byte(cmd), protocol.SetOptions{}); err != nil {
			t.Fatalf("set pause/cmd/%s: %v", who, err)
		}
	}
	result := func(who, cmd string) string {
		t.Helper()
		var got string
		waitFor(t, fmt.Sprintf("%s's result of %q", who, cmd), func() bool {
			got = string(get("pause/result/" + who).Value)
			return strings.HasPrefix(got, cmd+": ")
		})
		return strings.TrimPrefix(got, cmd+": ")
	}

	a := startSSRun(t, b.Addr(), "pause-a", src)
	startSSRun(t, b.Addr(), "pause-b", variant(t, src, `local ME = "a"`, `local ME = "b"`))

	command("a", "lock")
	if r := result("a", "lock"); r != "OK" {
		t.Fatalf("a's lock: %s", r)
	}
	command("a", "write 1")
	if r := result("a", "write 1"); r != "OK" {
		t.Fatalf("a's fenced write while holding: %s", r)
	}
	if v := string(get("pause/leader").Value); v != "pause-a:holder.lua" {
		t.Fatalf("lease held by %q, want a", v)
	}

	// a pauses; its lease runs out in the store, and b takes it.
	a.signal(t, syscall.SIGSTOP)
	waitFor(t, "a's lease to expire in the store", func() bool { return !get("pause/leader").Found })
	command("b", "lock")
	if r := result("b", "lock"); r != "OK" {
		t.Fatalf("b's lock: %s", r)
	}
	found := get("pause/shared") // b has not written it: a's token would pass the store
	if string(found.Value) != "a 1" {
		t.Fatalf("pause/shared = %q before a continues, want a's %q", found.Value, "a 1")
	}

	// a's next command is already waiting when it continues.
	command("a", "write 2")
	a.signal(t, syscall.SIGCONT)
	if r := result("a", "write 2"); !strings.HasPrefix(r, "LOCK_LOST") {
		t.Fatalf("a's fenced write after the pause: %s; want LOCK_LOST, refused locally", r)
	}
	if now := get("pause/shared"); string(now.Value) != string(found.Value) || now.Version != found.Version {
		t.Fatalf("pause/shared = %q (version %s) after a's late write, want what b found: %q (version %s)",
			now.Value, now.Version, found.Value, found.Version)
	}
	waitFor(t, "a's LOCK_LOST event", func() bool { return string(get("pause/lost/a").Value) == "pause/leader" })
	if !strings.Contains(a.out.String(), "lock lost") {
		t.Errorf("a's log does not report the lost lock")
	}
	// b holds the lease and writes under it.
	command("b", "write 1")
	if r := result("b", "write 1"); r != "OK" {
		t.Fatalf("b's fenced write: %s", r)
	}
	if v := string(get("pause/shared").Value); v != "b 1" {
		t.Fatalf("pause/shared = %q, want b's write", v)
	}
	if string(get("pause/lost/b").Value) != "" {
		t.Fatal("b was told it lost the lease")
	}
}
