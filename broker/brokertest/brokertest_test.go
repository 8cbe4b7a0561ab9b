package brokertest_test

import (
	"net"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
)

func TestStartServesOnLoopbackUntilCleanup(t *testing.T) {
	var addr string
	t.Run("inner", func(t *testing.T) {
		b := brokertest.Start(t, func(c *broker.Config) { c.Quota = 5 })
		addr = b.Addr()
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("address %q", addr)
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("broker not listening: %v", err)
		}
		_ = conn.Close()
	})
	if conn, err := net.Dial("tcp", addr); err == nil {
		_ = conn.Close()
		t.Fatal("broker still listening after the test that started it ended")
	}
}
