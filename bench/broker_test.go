package bench

// The embedded broker's memory under a hostile or heavy load, measured as
// the peak resident set (VmHWM) of a child `ssrun broker` process:
//
//   - slow-watcher: a client registers a key and stops reading while a
//     writer sets it 1,000 times with a 256 KiB value (250 MiB of
//     notifications for the watcher); baseline: the same with a watcher that
//     reads (healthy-watcher);
//   - 100k-keys: 100,000 keys of 100-byte values; reported per key.
//
// SSRUN_BASELINE_BIN=/path/to/other/ssrun runs the same scenarios against
// another build too (e.g. the commit before a change) in the same run.
//
//	go test -run '^$' -bench '^BenchmarkBrokerMemory$' -benchtime 1x -count 1 ./bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

func BenchmarkBrokerMemory(b *testing.B) {
	bins := map[string]string{"": ssrunBin(b)}
	if other := os.Getenv("SSRUN_BASELINE_BIN"); other != "" {
		bins["baseline-bin/"] = other
	}
	for prefix, bin := range bins {
		b.Run(prefix+"slow-watcher", func(b *testing.B) { brokerScenario(b, bin, watcherScenario(false)) })
		b.Run(prefix+"healthy-watcher", func(b *testing.B) { brokerScenario(b, bin, watcherScenario(true)) })
		b.Run(prefix+"100k-keys", func(b *testing.B) { brokerScenario(b, bin, manyKeys(100_000, 100)) })
	}
}

// TestBrokerMemoryFixture runs the benchmark's scenarios small, so CI keeps
// them working.
func TestBrokerMemoryFixture(t *testing.T) {
	bin := ssrunBin(t)
	brokerScenario(t, bin, watcherScenario(false))
	brokerScenario(t, bin, manyKeys(200, 10))
}

func ssrunBin(tb testing.TB) string {
	tb.Helper()
	path, err := testDir.Exe("ssrun", "../cmd/ssrun")
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// brokerScenario starts `bin broker` on a free loopback port, runs load
// against it and reports its resident memory before (idle) and at peak.
func brokerScenario(tb testing.TB, bin string, load func(tb testing.TB, addr string) (keys int)) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "broker", "--listen", "127.0.0.1:0", "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	addrRe := regexp.MustCompile(`listening on (\S+)`)
	sc := bufio.NewScanner(stdout)
	addr := ""
	for sc.Scan() {
		if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		tb.Fatal("broker did not print its address")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	idle := procStatus(tb, cmd.Process.Pid, "VmRSS:")
	keys := load(tb, addr)
	peak := procStatus(tb, cmd.Process.Pid, "VmHWM:")
	if b, ok := tb.(*testing.B); ok {
		b.ReportMetric(float64(idle)/(1<<20), "idle-MiB")
		b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
		if keys > 0 {
			b.ReportMetric(float64(peak-idle)/float64(keys), "B/key")
		}
	}
}

func procStatus(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func dialStore(tb testing.TB, addr, id string) *protocol.Client {
	tb.Helper()
	return protocoltest.Connect(tb, protocol.Config{Servers: []string{addr}, ClientID: id, Timeout: 30 * time.Second})
}

// watcherScenario: a watcher of "big" (reading or not) while a writer sets
// it with 256 KiB values, 1,000 times (50 in the CI fixture).
func watcherScenario(reads bool) func(tb testing.TB, addr string) int {
	return func(tb testing.TB, addr string) int {
		writes := 1000
		if _, ok := tb.(*testing.B); !ok {
			writes = 50
		}
		ctx := context.Background()
		if reads {
			w := dialStore(tb, addr, "healthy-watcher")
			if err := w.KeyNotify(ctx, []byte("big"), protocol.CallOptions{}); err != nil {
				tb.Fatal(err)
			}
			done := make(chan struct{})
			defer func() { <-done }()
			go func() {
				defer close(done)
				for n := 0; n < writes; {
					select {
					case ev := <-w.Events():
						if ev.Kind == protocol.EventNotify {
							n++
						}
					case <-time.After(time.Minute):
						return
					}
				}
			}()
		} else {
			stalled := stalledWatcher(tb, addr, "big")
			defer stalled.Close()
		}
		c := dialStore(tb, addr, "writer")
		value := bytes.Repeat([]byte("x"), 256<<10)
		for i := range writes {
			value[0] = byte(i)
			if _, err := c.Set(ctx, []byte("big"), value, protocol.SetOptions{}); err != nil {
				tb.Fatal(err)
			}
		}
		return 0
	}
}

// stalledWatcher connects over raw MQTT, registers key and never reads again.
func stalledWatcher(tb testing.TB, addr, key string) net.Conn {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096) // a slow reader's socket, not a big kernel buffer
	}
	write := func(cp *packets.ControlPacket) {
		if _, err := cp.WriteTo(nc); err != nil {
			tb.Fatal(err)
		}
	}
	read := func() *packets.ControlPacket {
		_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		cp, err := packets.ReadPacket(nc)
		if err != nil {
			tb.Fatal(err)
		}
		return cp
	}
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.CleanStart, c.KeepAlive, c.ProtocolName, c.ProtocolVersion = "stalled", true, 0, "MQTT", 5
	write(cp)
	read() // CONNACK
	rt := wire.ResponseTopic("stalled")
	sub := packets.NewControlPacket(packets.SUBSCRIBE)
	s := sub.Content.(*packets.Subscribe)
	s.PacketID, s.Subscriptions = 1, []packets.SubOptions{{Topic: rt, QoS: 1}}
	write(sub)
	read() // SUBACK
	pub := packets.NewControlPacket(packets.PUBLISH)
	p := pub.Content.(*packets.Publish)
	p.QoS, p.PacketID, p.Topic = 1, 2, wire.RequestTopic
	p.Payload = resp.EncodeRequest([]byte("KEYNOTIFY"), []byte(key))
	p.Properties = &packets.Properties{ResponseTopic: rt, CorrelationData: []byte("stalled-keynotify")}
	write(pub)
	for got := 0; got < 2; got++ { // PUBACK and the +OK
		if r := read(); r.Type == packets.PUBLISH {
			ack := packets.NewControlPacket(packets.PUBACK)
			ack.Content.(*packets.Puback).PacketID = r.Content.(*packets.Publish).PacketID
			write(ack)
		}
	}
	return nc
}

// manyKeys sets n keys of size-byte values, 64 requests in flight.
func manyKeys(n, size int) func(tb testing.TB, addr string) int {
	return func(tb testing.TB, addr string) int {
		c := dialStore(tb, addr, "loader")
		value := bytes.Repeat([]byte("v"), size)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 64 {
					if _, err := c.Set(context.Background(), []byte(fmt.Sprintf("key/%07d", i)), value, protocol.SetOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
		return n
	}
}
