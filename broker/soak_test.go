package broker_test

// The conformance soak: every request the store accepts gets exactly one
// reply, call after call, one at a time and 64 in flight, from a client
// that behaves like the official Go SDK (sdkclient_test.go: packet ids that
// collide with the store's in-flight responses, acknowledgements after
// handling and out of order, QoS 1 requests with Message Expiry) and from
// ssrun's own client, with the store in memory, with a data directory and
// with a password file and an ACL. The SDK lost one reply in a few hundred
// calls before (issue 32: mochi's inflight store deadlocked between the
// store's writer and the client's reader, mochi.go).
//
// Each soak makes soakCalls calls (20,000), soakCallsRace under the race
// detector, which slows the broker about tenfold: `go test -race ./...`
// runs the smaller soak, and .ci/run runs the full one without it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
)

const (
	soakCalls     = 20_000
	soakCallsRace = 2_000
	soakKeys      = 64
)

func soakSize() int {
	if raceEnabled {
		return soakCallsRace
	}
	return soakCalls
}

// soakBroker is one configuration of the broker under soak, and how a
// client logs in to it.
type soakBroker struct {
	name  string
	start func(t *testing.T) *broker.Broker
	user  string // "" for none
	pw    string
}

// soakACL grants the soak's user Connect and every key.
const soakACL = `authorizationPolicies:
  rules:
    - principals:
        usernames: ["soak"]
      brokerResources:
        - method: Connect
      stateStoreResources:
        - method: ReadWrite
          keyType: Pattern
          keys: ["*"]
`

func soakBrokers() []soakBroker {
	return []soakBroker{
		{name: "memory", start: func(t *testing.T) *broker.Broker { return brokertest.Start(t) }},
		{name: "data", start: func(t *testing.T) *broker.Broker {
			dir := t.TempDir()
			return brokertest.Start(t, func(c *broker.Config) { c.DataDir = dir })
		}},
		{name: "acl", user: "soak", pw: "soak-pw", start: func(t *testing.T) *broker.Broker {
			dir := t.TempDir()
			pw, acl := filepath.Join(dir, "passwords"), filepath.Join(dir, "acl.yaml")
			if err := os.WriteFile(pw, []byte("soak:"+cheapHash(t, "soak-pw")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(acl, []byte(soakACL), 0o600); err != nil {
				t.Fatal(err)
			}
			return brokertest.Start(t, func(c *broker.Config) { c.PasswordFile, c.ACLFile = pw, acl })
		}},
	}
}

// eachSoak runs soak once per broker setting and concurrency, then checks
// the broker dropped nothing.
func eachSoak(t *testing.T, soak func(t *testing.T, b *broker.Broker, sb soakBroker, n, inflight int)) {
	for _, sb := range soakBrokers() {
		for _, inflight := range []int{1, 64} {
			t.Run(fmt.Sprintf("%s/inflight=%d", sb.name, inflight), func(t *testing.T) {
				b := sb.start(t)
				soak(t, b, sb, soakSize(), inflight)
				if s := b.Stats(); s.QueueOverflows != 0 || s.NotifyDropped != 0 {
					t.Fatalf("broker: %d queue overflows, %d messages not delivered", s.QueueOverflows, s.NotifyDropped)
				}
			})
		}
	}
}

func TestSoakSDKClient(t *testing.T) {
	eachSoak(t, func(t *testing.T, b *broker.Broker, sb soakBroker, n, inflight int) {
		var counts sdkCounts
		var opts []sdkOpt
		if sb.user != "" {
			opts = append(opts, sdkCredentials(sb.user, sb.pw))
		}
		c := dialSDK(t, b.Addr(), &counts, opts...)
		defer func() { t.Log(&counts) }() // also when a call fails
		elapsed := testutil.InFlight(t, inflight, n, func(_, i int) error {
			return c.set(fmt.Sprintf("soak/%d", i%soakKeys), fmt.Sprint(i))
		})
		t.Logf("%d calls in %v (%.0f calls/s)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
		if err := c.settle(); err != nil {
			t.Fatal(err)
		}
		if counts.calls.Load() != int64(n)+1 || counts.timeouts.Load()+counts.wrong.Load()+counts.duplicates.Load()+
			counts.strays.Load()+counts.reusedIDs.Load()+counts.pubackFail.Load() != 0 {
			t.Fatalf("want %d answered calls and nothing else: %v", n+1, &counts)
		}
		if counts.collisions.Load() == 0 {
			t.Fatalf("no request reused the id of an unacknowledged response: the soak did not test collisions")
		}
	})
}

func TestSoakOwnClient(t *testing.T) {
	eachSoak(t, func(t *testing.T, b *broker.Broker, sb soakBroker, n, inflight int) {
		cfg := protocol.Config{Servers: []string{b.Addr()}, ClientID: fmt.Sprintf("own-%d", clientSeq.Add(1)),
			SessionExpiry: 3600}
		if sb.user != "" {
			cfg.Credentials = func() (protocol.Credentials, error) {
				return protocol.Credentials{Username: sb.user, Password: []byte(sb.pw)}, nil
			}
		}
		c := protocoltest.Connect(t, cfg)
		defer func() { t.Logf("client: %+v", c.Stats()) }()
		elapsed := testutil.InFlight(t, inflight, n, func(_, i int) error {
			_, err := c.Set(context.Background(), fmt.Appendf(nil, "soak/%d", i%soakKeys), fmt.Append(nil, i), protocol.SetOptions{})
			return err
		})
		t.Logf("%d calls in %v (%.0f calls/s)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
		if st := c.Stats(); st.Responses != uint64(n) || st.Reconnects != 0 || st.UnmatchedResponses != 0 {
			t.Fatalf("want %d responses, no reconnection, no unmatched response: %+v", n, st)
		}
	})
}

// BenchmarkSDKClient measures calls/s of the SDK-like client (SET, in
// memory) one at a time and 64 in flight. BENCHMARKS.md compares it with
// the broker before issue 32's fix.
func BenchmarkSDKClient(b *testing.B) {
	for _, inflight := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			br := brokertest.Start(b)
			var counts sdkCounts
			c := dialSDK(b, br.Addr(), &counts)
			b.ResetTimer()
			elapsed := testutil.InFlight(b, inflight, b.N, func(_, i int) error {
				return c.set(fmt.Sprintf("bench/%d", i%soakKeys), "v")
			})
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
		})
	}
}
