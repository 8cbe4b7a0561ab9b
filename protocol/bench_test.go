package protocol

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// BenchmarkRequests measures SET round trips through Client against the
// embedded store, next to a RAW FLOOR measured in the same run: a bare mochi
// broker whose hook answers every request in OnPublish with a fixed `+OK`
// reply carrying the response properties of the store (__stat, __ts,
// __protVer, correlation data, content type), driven by a minimal autopaho
// client with its own buffered-channel correlation map (no HLC, no parsing).
// Both send the same request payload with the same properties.
//
// The two are interleaved (one operation = one floor and one client request,
// or alternating chunks of 512 at 64 in flight) so that the ratios hold on a
// machine whose load drifts. Metrics: p50/p99 latency in µs of each at 1 in
// flight and their ratio p50-x-floor (target <= 1.5); requests per second of
// each at 64 in flight and their ratio reqps-x-floor (target >= 0.7).
func BenchmarkRequests(b *testing.B) {
	key := []byte("bench-key-0001")
	value := []byte("0123456789abcdef0123456789abcdef")
	payload := resp.EncodeRequest(bSet, key, value)

	raw := newRawClient(b, startFloor(b))
	store := brokertest.Start(b, func(cfg *broker.Config) {
		cfg.Logger = slog.New(slog.DiscardHandler)
	})
	c := connect(b, store.Addr())

	floor := func(ctx context.Context) error { return raw.request(ctx, payload) }
	client := func(ctx context.Context) error {
		_, err := c.Set(ctx, key, value, SetOptions{})
		return err
	}
	b.Run("inflight-1", func(b *testing.B) {
		ctx := context.Background()
		latF, latC := make([]time.Duration, b.N), make([]time.Duration, b.N)
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if err := floor(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := client(ctx); err != nil {
				b.Fatal(err)
			}
			latF[i], latC[i] = t1.Sub(t0), time.Since(t1)
		}
		b.StopTimer()
		p50f, p99f := percentiles(latF)
		p50c, p99c := percentiles(latC)
		b.ReportMetric(p50f, "floor-p50-µs")
		b.ReportMetric(p99f, "floor-p99-µs")
		b.ReportMetric(p50c, "client-p50-µs")
		b.ReportMetric(p99c, "client-p99-µs")
		b.ReportMetric(p50c/p50f, "p50-x-floor")
	})
	b.Run("inflight-64", func(b *testing.B) {
		const chunk = 512
		ctx := context.Background()
		var elapsedF, elapsedC time.Duration
		b.ResetTimer()
		for done := 0; done < b.N; done += chunk {
			n := min(chunk, b.N-done)
			elapsedF += testutil.InFlight(b, 64, n, func(_, _ int) error { return floor(ctx) })
			elapsedC += testutil.InFlight(b, 64, n, func(_, _ int) error { return client(ctx) })
		}
		b.StopTimer()
		rateF := float64(b.N) / elapsedF.Seconds()
		rateC := float64(b.N) / elapsedC.Seconds()
		b.ReportMetric(rateF, "floor-req/s")
		b.ReportMetric(rateC, "client-req/s")
		b.ReportMetric(rateC/rateF, "reqps-x-floor")
	})
}

// percentiles sorts lat and returns its p50 and p99 in µs.
func percentiles(lat []time.Duration) (p50, p99 float64) {
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return us(lat[len(lat)/2]), us(lat[len(lat)*99/100])
}

// floorHook answers every request at once with a fixed +OK reply and
// re-enables problem info (user properties) on outbound PUBLISHes.
type floorHook struct {
	mqtt.HookBase
	srv    *mqtt.Server
	inline *mqtt.Client
	pid    atomic.Uint32
}

func (h *floorHook) ID() string { return "floor" }

func (h *floorHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck || b == mqtt.OnPublish || b == mqtt.OnPacketEncode
}

func (h *floorHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

func (h *floorHook) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

func (h *floorHook) OnPacketEncode(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Publish {
		pk.Mods.DisallowProblemInfo = false
	}
	return pk
}

func (h *floorHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != wire.RequestTopic {
		return pk, nil
	}
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   pk.Properties.ResponseTopic,
		Payload:     resp.OK,
		PacketID:    uint16(h.pid.Add(1)%65535 + 1),
		Properties: packets.Properties{
			CorrelationData: pk.Properties.CorrelationData,
			ContentType:     wire.ContentType,
			User: []packets.UserProperty{
				{Key: wire.PropStatus, Val: wire.StatusOK},
				{Key: wire.PropTimestamp, Val: "001732000000000:00001:StateStore"},
				{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
			},
		},
	}
	_ = h.srv.InjectPacket(h.inline, out)
	return pk, packets.CodeSuccessIgnore
}

// startFloor starts the floor broker and returns its address.
func startFloor(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler), InlineClient: true})
	srv.Options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck = true
	h := &floorHook{srv: srv, inline: srv.NewClient(nil, mqtt.LocalListener, "floor-inline", true)}
	if err := srv.AddHook(h, nil); err != nil {
		b.Fatal(err)
	}
	if err := srv.AddListener(listeners.NewNet("floor", ln)); err != nil {
		b.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// rawClient is the floor's driver: autopaho, a correlation map of buffered
// channels, the same request properties as Client, nothing else.
type rawClient struct {
	cm        *autopaho.ConnectionManager
	respTopic string
	user      paho.UserProperties
	next      atomic.Uint64

	mu      sync.Mutex
	pending map[[16]byte]chan *paho.Publish
}

func newRawClient(b *testing.B, addr string) *rawClient {
	const id = "floor-client"
	r := &rawClient{
		respTopic: wire.ResponseTopic(id),
		pending:   map[[16]byte]chan *paho.Publish{},
		user: paho.UserProperties{
			{Key: wire.PropSourceID, Value: id},
			{Key: wire.PropTimestamp, Value: "001732000000000:00000:floor"},
			{Key: wire.PropProtVer, Value: wire.ProtocolVersion},
			{Key: wire.PropPartition, Value: id},
		},
	}
	u, _ := url.Parse("mqtt://" + addr)
	ctx, cancel := context.WithCancel(context.Background())
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u},
		KeepAlive:  60,
		ClientConfig: paho.ClientConfig{
			ClientID:          id,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){r.onPublish},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	r.cm = cm
	b.Cleanup(func() {
		cancel()
		<-cm.Done()
	})
	if err := cm.AwaitConnection(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: r.respTopic, QoS: 1}}}); err != nil {
		b.Fatal(err)
	}
	return r
}

func (r *rawClient) onPublish(pr paho.PublishReceived) (bool, error) {
	var id [16]byte
	copy(id[:], pr.Packet.Properties.CorrelationData)
	r.mu.Lock()
	ch, ok := r.pending[id]
	delete(r.pending, id)
	r.mu.Unlock()
	if ok {
		ch <- pr.Packet
	}
	return true, nil
}

func (r *rawClient) request(ctx context.Context, payload []byte) error {
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:], r.next.Add(1))
	ch := make(chan *paho.Publish, 1)
	r.mu.Lock()
	r.pending[id] = ch
	r.mu.Unlock()
	expiry := uint32(10)
	_, err := r.cm.Publish(ctx, &paho.Publish{
		QoS:     1,
		Topic:   wire.RequestTopic,
		Payload: payload,
		Properties: &paho.PublishProperties{
			CorrelationData: id[:],
			ResponseTopic:   r.respTopic,
			ContentType:     wire.ContentType,
			PayloadFormat:   &payloadFormatUnspecified,
			MessageExpiry:   &expiry,
			User:            r.user,
		},
	})
	if err != nil {
		return err
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errors.New("floor: no response within 10 s")
	}
}
