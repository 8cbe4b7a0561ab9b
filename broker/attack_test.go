package broker_test

// Attacks on the embedded store by hostile or careless clients, each over
// real MQTT on a random loopback port (issue: "The embedded store,
// hardened"). Every test here failed on the store before the fix it names.

import (
	"errors"
	"io"
	"net"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// A request that reuses a correlation id with another command is executed,
// not answered with the first request's reply (a GET answered "+OK", a DEL
// silently not done).
func TestReusedCorrelationIDRunsTheNewRequest(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	corr := newCorr()
	get := c.request(resp.EncodeRequest([]byte("GET"), []byte("k")))
	get.Properties.CorrelationData = corr
	expectPayload(t, c.mustExchange(get), "$-1\r\n")
	set := c.request(resp.EncodeRequest([]byte("SET"), []byte("k"), []byte("v")))
	set.Properties.CorrelationData = corr
	expectPayload(t, c.mustExchange(set), "+OK\r\n")
	del := c.request(resp.EncodeRequest([]byte("DEL"), []byte("k")))
	del.Properties.CorrelationData = corr
	expectPayload(t, c.mustExchange(del), ":1\r\n")
	expectPayload(t, c.call("GET", "k"), "$-1\r\n")
}

// A client cannot pre-empt another's request by sending its own first with
// the victim's correlation data and response topic.
func TestOtherClientCannotPreemptARequest(t *testing.T) {
	b := brokertest.Start(t)
	victim := dial(t, b)
	expectPayload(t, victim.call("SET", "k", "v"), "+OK\r\n")
	corr := newCorr()

	attacker := dialRaw(t, b, "attacker")
	attacker.write(rawRequest(3, victim.respTopic, corr, "", false, "GET", "absent"))
	if p := attacker.read(); p.Type != packets.PUBACK {
		t.Fatalf("attacker got %s, want PUBACK", p.PacketType())
	}
	// The forged reply went to the victim's topic; the victim's client drops
	// it as a stray (nothing pending under corr yet).
	victim.strays()

	get := victim.request(resp.EncodeRequest([]byte("GET"), []byte("k")))
	get.Properties.CorrelationData = corr
	expectPayload(t, victim.mustExchange(get), bulk("v"))
}

// A watcher that stops reading is disconnected once its output queue
// overflows, and the broker's heap does not follow its backlog: with 256 KiB
// values the old per-connection bound of 1024 notifications held 256 MiB.
func TestSlowWatcherIsDisconnectedAndMemoryStaysBounded(t *testing.T) {
	const queueBytes = 4 << 20
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.ClientQueueBytes = queueBytes })
	slow := dialRaw(t, b, "slow-watcher")
	slow.subscribe(wire.ResponseTopic("slow-watcher"))
	slow.write(rawRequest(2, wire.ResponseTopic("slow-watcher"), newCorr(), "", false, "KEYNOTIFY", "big"))
	for got := 0; got < 2; got++ { // PUBACK and the +OK
		if p := slow.read(); p.Type == packets.PUBLISH {
			slow.ack(p.Content.(*packets.Publish).PacketID)
		}
	}
	// From here on the slow watcher reads nothing.

	writer := dial(t, b)
	value := strings.Repeat("x", 256<<10)
	before := heapLive()
	const writes = 600 // 150 MiB of notifications for the slow watcher
	var peak uint64
	for i := range writes {
		expectPayload(t, writer.call("SET", "big", value[:len(value)-i%7]), "+OK\r\n")
		if i%50 == 0 {
			peak = max(peak, heapLive())
		}
	}
	waitFor(t, "the slow watcher to be disconnected", func() bool { return b.Stats().QueueOverflows == 1 })
	peak = max(peak, heapLive())
	// The watcher's queue is bounded by queueBytes; allow the writer's
	// traffic, one value per in-flight message and collector slack.
	if bound := before + 48<<20; peak > bound {
		t.Fatalf("live heap peaked at %d MiB (started at %d MiB): the slow watcher's backlog was kept", peak>>20, before>>20)
	}
	if _, regs := b.Stats().Keys, b.Stats().Registrations; regs != 0 {
		t.Fatalf("%d registrations left after the slow watcher was disconnected", regs)
	}
	// Its socket was closed by the broker.
	_ = slow.nc.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.Copy(io.Discard, slow.nc); err != nil && !isClosed(err) {
		t.Fatalf("slow watcher's connection: %v", err)
	}
}

// A client that reads its notifications but never acknowledges them is
// bounded the same way: unacknowledged messages count.
func TestUnacknowledgingWatcherIsDisconnected(t *testing.T) {
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.ClientQueueLen = 64 })
	lazy := dialRaw(t, b, "never-acks")
	rt := wire.ResponseTopic("never-acks")
	lazy.subscribe(rt)
	lazy.write(rawRequest(2, rt, newCorr(), "", false, "KEYNOTIFY", "k"))
	writer := dial(t, b)
	done := make(chan error, 1)
	go func() { // read everything, acknowledge nothing
		_ = lazy.nc.SetReadDeadline(time.Now().Add(3 * wait))
		for {
			if _, err := packets.ReadPacket(lazy.nc); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := 0; b.Stats().QueueOverflows == 0; i++ {
		if i > 10*64 {
			t.Fatal("no overflow after ten times the queue length of unacknowledged notifications")
		}
		expectPayload(t, writer.call("SET", "k", "v"), "+OK\r\n")
	}
	if err := <-done; !isClosed(err) {
		t.Fatalf("lazy watcher's connection ended with %v, want closed by the broker", err)
	}
}

// A requester that stops reading its responses is disconnected too: GETs of
// a large value pile up in its outbox, not in the broker's heap.
func TestRequesterThatStopsReadingIsDisconnected(t *testing.T) {
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.ClientQueueBytes = 4 << 20 })
	writer := dial(t, b)
	expectPayload(t, writer.call("SET", "big", strings.Repeat("y", 256<<10)), "+OK\r\n")
	greedy := dialRaw(t, b, "greedy")
	rt := wire.ResponseTopic("greedy")
	greedy.subscribe(rt)
	// Write requests without reading anything; the broker must end it.
	var err error
	for i := 0; i < 2000 && err == nil; i++ {
		_ = greedy.nc.SetWriteDeadline(time.Now().Add(wait))
		_, err = rawRequest(uint16(i%60000+1), rt, newCorr(), "", false, "GET", "big").WriteTo(greedy.nc)
	}
	waitFor(t, "the greedy requester to be disconnected", func() bool { return b.Stats().QueueOverflows == 1 })
}

// A socket that never sends CONNECT is closed after the connect timeout.
func TestSilentSocketIsClosedAfterConnectTimeout(t *testing.T) {
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.ConnectTimeout = 100 * time.Millisecond })
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	_, err = nc.Read(make([]byte, 1))
	if !isClosed(err) {
		t.Fatalf("silent socket: read returned %v, want the broker to close it", err)
	}
}

func isClosed(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "connection reset")
}

// heapLive is the live heap after a full collection.
func heapLive() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
