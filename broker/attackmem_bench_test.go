package broker_test

// BenchmarkAttackMemory measures the broker's live heap (after a full
// collection, sampled after every step; peak and final) under issue 25's
// points 1 and 2, in process:
//
//   - leaving-sessions: 12 client ids each connect with a session that never
//     expires (the Go SDK's default) and Receive Maximum 65,535, send 4 GETs
//     of a 3.9 MB value, acknowledge nothing and leave;
//   - returning-session: one client id does the same 25 times, resuming its
//     session (Clean Start 0);
//   - big-registrations: with MaxBytes 64 MiB, one connection registers 80
//     keys of 3.9 MB (KEYNOTIFY), the store holding no key.
//
// The file uses only what the broker's tests had before issue 25, so it can
// be copied into an older tree to measure it in the same run:
//
//	go test -run '^$' -bench '^BenchmarkAttackMemory$' -benchtime 1x ./broker

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/wire"
)

func BenchmarkAttackMemory(b *testing.B) {
	big := string(bytes.Repeat([]byte("b"), 3_900_000))
	scenarios := []struct {
		name string
		cfg  func(*broker.Config)
		run  func(b *testing.B, br *broker.Broker, step func())
	}{
		{"leaving-sessions", func(*broker.Config) {}, func(b *testing.B, br *broker.Broker, step func()) {
			for i := range 12 {
				leaveGETs(b, br.Addr(), fmt.Sprint("leaver-", i), true)
				step()
			}
		}},
		{"returning-session", func(*broker.Config) {}, func(b *testing.B, br *broker.Broker, step func()) {
			for i := range 25 {
				leaveGETs(b, br.Addr(), "returner", i == 0)
				step()
			}
		}},
		{"big-registrations", func(c *broker.Config) { c.MaxBytes = 64 << 20 }, func(b *testing.B, br *broker.Broker, step func()) {
			c := dial(b, br)
			key := []byte(big)
			for i := range 80 {
				copy(key, fmt.Sprintf("%03d", i))
				c.call("KEYNOTIFY", string(key)) // +OK, or the quota error
				if i%8 == 7 {
					step()
				}
			}
		}},
	}
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			for range b.N {
				br := brokertest.Start(b, sc.cfg)
				if sc.name != "big-registrations" {
					expectPayload(b, dial(b, br).call("SET", "big", big), "+OK\r\n")
				}
				base := heapLive()
				var peak uint64
				step := func() { peak = max(peak, heapLive()) }
				sc.run(b, br, step)
				b.ReportMetric(float64(peak-base)/(1<<20), "peak-live-MiB")
				b.ReportMetric(float64(heapLive()-base)/(1<<20), "end-live-MiB")
			}
		})
	}
}

// leaveGETs connects id with a session that never expires, sends 4 GETs of
// "big" and one of a missing key, reads until the last one's PUBACK (or the
// broker ends the connection), acknowledges nothing and leaves.
func leaveGETs(tb testing.TB, addr, id string, clean bool) {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	write := func(cp *packets.ControlPacket) { _, _ = cp.WriteTo(nc) } // fails once the broker ends it
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.CleanStart, c.KeepAlive, c.ProtocolName, c.ProtocolVersion = id, clean, 60, "MQTT", 5
	expiry, recvMax := uint32(math.MaxUint32), uint16(math.MaxUint16)
	c.Properties = &packets.Properties{SessionExpiryInterval: &expiry, ReceiveMaximum: &recvMax}
	write(cp)
	rt := wire.ResponseTopic(id)
	sub := packets.NewControlPacket(packets.SUBSCRIBE)
	sub.Content.(*packets.Subscribe).PacketID = 1
	sub.Content.(*packets.Subscribe).Subscriptions = []packets.SubOptions{{Topic: rt, QoS: 1}}
	write(sub)
	for i := range 4 {
		write(rawRequest(uint16(10+i), rt, newCorr(), "", false, "GET", "big"))
	}
	write(rawRequest(20, rt, newCorr(), "", false, "GET", "none"))
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	for {
		p, err := packets.ReadPacket(nc)
		if err != nil || p.Type == packets.DISCONNECT {
			return
		}
		if a, ok := p.Content.(*packets.Puback); ok && a.PacketID == 20 {
			return
		}
	}
}
