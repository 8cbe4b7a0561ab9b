package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

func hashOf(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:6])
}

// statusOf returns the status of the rule file at p, or fails.
func (e *env) statusOf(p string) RuleStatus {
	e.t.Helper()
	for _, s := range e.host.Status() {
		if s.Path == p {
			return s
		}
	}
	e.t.Fatalf("%s not in the status", p)
	return RuleStatus{}
}

// A rule's status names the version that runs (its content hash), its
// state, and its last error with its time: a reload that fails leaves the
// previous version running and says so; a file that never loaded is listed
// as failed; a fixed file runs again.
func TestRuleStateHashAndLastError(t *testing.T) {
	e := newEnv(t)
	p := e.load("v1", goRule{init: watchInit("k")})
	if s := e.statusOf(p); s.State != StateRunning || s.Hash != hashOf("v1") || s.Kind != "gorule" || s.LastError != "" || !s.LastErrorAt.IsZero() {
		t.Fatalf("loaded: %+v, want running, hash %s, no error", s, hashOf("v1"))
	}

	before := time.Now()
	e.write(p, "no-such-rule")
	if err := e.host.Load(e.ctx(), p); err == nil {
		t.Fatal("a broken version loaded")
	}
	s := e.statusOf(p)
	if s.State != StateReloadFailed || s.Hash != hashOf("v1") || !strings.Contains(s.LastError, "v1.gorule:1") || s.LastErrorAt.Before(before) {
		t.Fatalf("after a failed reload: %+v, want %q, the running hash %s and the compile error", s, StateReloadFailed, hashOf("v1"))
	}

	// A file that never loaded: listed, with the hash of what failed.
	q := filepath.Join(e.dir, "later.gorule")
	e.write(q, "later")
	if err := e.host.Load(e.ctx(), q); err == nil {
		t.Fatal("an unknown rule loaded")
	}
	if s := e.statusOf(q); s.State != StateLoadFailed || s.Kind != "gorule" || s.Hash != hashOf("later") || !strings.Contains(s.LastError, `no rule named "later"`) {
		t.Fatalf("a file that failed to load: %+v", s)
	}
	e.rt.register("later", goRule{})
	if err := e.host.Load(e.ctx(), q); err != nil {
		t.Fatal(err)
	}
	if s := e.statusOf(q); s.State != StateRunning {
		t.Fatalf("fixed: %+v, want running", s)
	}
	if n := len(e.host.Status()); n != 2 {
		t.Fatalf("%d rules listed, want 2: %+v", n, e.host.Status())
	}

	// The running version again: no longer a failed reload.
	e.reload(p, "v1")
	if s := e.statusOf(p); s.State != StateRunning || s.LastError == "" {
		t.Fatalf("restored: %+v, want running, the last error kept", s)
	}
}

// A failing handler's error is the rule's last error; repeated failures
// disable it.
func TestRuleLastHandlerError(t *testing.T) {
	e := newEnv(t)
	p := e.load("bad", goRule{init: watchInit("k"), handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
		return fmt.Errorf("boom %s", ev.Value)
	}})
	e.set("k", "0")
	waitFor(t, "a failure", func() bool { return e.statusOf(p).Failed == 1 })
	if s := e.statusOf(p); s.State != StateRunning || !strings.Contains(s.LastError, `"k": boom 0`) || s.LastErrorAt.IsZero() {
		t.Fatalf("after a failure: %+v", s)
	}
	for i := 1; i < maxConsecutiveFailures; i++ {
		e.set("k", strconv.Itoa(i))
	}
	waitFor(t, "disabled", func() bool { return e.statusOf(p).Disabled })
	if s := e.statusOf(p); s.State != StateDisabled || !strings.Contains(s.LastError, "boom "+strconv.Itoa(maxConsecutiveFailures-1)) {
		t.Fatalf("disabled: %+v", s)
	}
}

// A status that counts a failure shows its error: the count and the last
// error are read in that order, so the count must be written after the
// error (CI once caught a status with Failed 1 and no LastError).
func TestStatusCountsOnlyNotedFailures(t *testing.T) {
	e := newEnv(t)
	p := e.load("bad", goRule{init: watchInit("k"), handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
		return fmt.Errorf("boom %s", ev.Value)
	}})
	const events = 5 // fewer than disable the rule
	done := make(chan struct{})
	seen := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if s := e.statusOf(p); s.Failed > 0 && s.LastError == "" {
				seen <- fmt.Sprintf("%+v", s)
				return
			}
		}
	})
	for i := range events {
		e.set("k", strconv.Itoa(i))
		waitFor(t, "the failure counted", func() bool { return e.statusOf(p).Failed == uint64(i+1) })
	}
	close(done)
	wg.Wait()
	select {
	case s := <-seen:
		t.Fatalf("a status counted a failure without its error: %s", s)
	default:
	}
}

func TestClipLastError(t *testing.T) {
	long := strings.Repeat("é", maxLastError) // 2 bytes each
	got := clip(long)
	if len(got) > maxLastError || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Fatalf("clip: %d bytes, %q...", len(got), got[:10])
	}
	if clip("short") != "short" {
		t.Fatal("a short message was changed")
	}
}

// A fix by revert is seen: saving the running version back over a version
// that failed to load says that the file matches the running version
// again, and the rule is running, not "reload failed", once more.
func TestRevertToRunningVersionIsLogged(t *testing.T) {
	e := newEnv(t)
	p := e.load("v1", goRule{init: watchInit("k")})
	e.write(p, "no-such-rule")
	if err := e.host.Load(e.ctx(), p); err == nil {
		t.Fatal("a broken version loaded")
	}
	e.reload(p, "v1")
	if got := e.logLines("the file matches the running version again", "rule=v1.gorule"); len(got) != 1 {
		t.Fatalf("%d lines saying the revert, want 1:\n%s", len(got), e.logs.String())
	}
	if s := e.statusOf(p); s.State != StateRunning || s.Hash != hashOf("v1") {
		t.Fatalf("after the revert: %+v, want running %s", s, hashOf("v1"))
	}
	// Saving the running version again (nothing had failed) says nothing.
	if err := e.host.Load(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	if got := e.logLines("the file matches the running version again"); len(got) != 1 {
		t.Fatalf("%d lines saying a revert, want still 1:\n%s", len(got), e.logs.String())
	}
}
