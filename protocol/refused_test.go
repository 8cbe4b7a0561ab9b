package protocol_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// A CONNACK refusal that retrying cannot fix ends AwaitConnectionOrRefusal
// at once with the reason, long before its context's deadline; the client
// says it once however often it is refused again, and connects as soon as
// the credentials are right (rotated) without being told.
func TestRefusalEndsTheWaitAndIsSaidOnce(t *testing.T) {
	hash, err := broker.HashPassword([]byte("right"))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, func(c *broker.Config) { c.Users = map[string][]byte{"alice": []byte(hash)} })
	var mu sync.Mutex
	password := "wrong"
	logs := &testutil.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := protocol.New(ctx, protocol.Config{
		Servers:  []string{b.Addr()},
		ClientID: "refused-client",
		Credentials: func() (protocol.Credentials, error) {
			mu.Lock()
			defer mu.Unlock()
			return protocol.Credentials{Username: "alice", Password: []byte(password)}, nil
		},
		Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReconnectBackoff: func(int) time.Duration { return 10 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	err = c.AwaitConnectionOrRefusal(ctx) // two minutes: only the refusal ends it early
	var re *protocol.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, protocol.ErrRefused) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitConnectionOrRefusal = %v, want the refusal", err)
	}
	if re.Code != 0x86 || !re.Permanent() || re.Username != "alice" || re.ClientID != "refused-client" ||
		re.Error() != "the broker refused the connection: bad user name or password (CONNACK reason code 0x86)" {
		t.Fatalf("refusal %+v: %v", re, re)
	}
	// Refused again and again (10 ms apart): said once, at ERROR.
	for strings.Count(logs.String(), "refused the connection again") < 3 {
		if ctx.Err() != nil {
			t.Fatalf("no repeated refusal; logs:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"the broker refused the connection"); n != 1 {
		t.Fatalf("the refusal was said %d times at ERROR, want once:\n%s", n, logs.String())
	}
	if got := c.LastRefusal(); got == nil || got.Code != 0x86 {
		t.Fatalf("LastRefusal = %v", got)
	}
	mu.Lock()
	password = "right"
	mu.Unlock()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if got := c.LastRefusal(); got != nil {
		t.Fatalf("LastRefusal after connecting = %v, want nil", got)
	}
}

// Codes a retry may cure (server busy, quota) are not permanent.
func TestRefusedErrorPermanent(t *testing.T) {
	for code, want := range map[byte]bool{0x85: true, 0x86: true, 0x87: true, 0x8A: true, 0x8C: true, 0x88: false, 0x89: false, 0x97: false, 0x9F: false} {
		e := &protocol.RefusedError{Code: code}
		if e.Permanent() != want {
			t.Errorf("0x%02X: Permanent %v, want %v", code, e.Permanent(), want)
		}
	}
}
