package brokertest_test

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
)

func TestStartServesOnLoopbackUntilCleanup(t *testing.T) {
	var conn net.Conn
	t.Run("inner", func(t *testing.T) {
		b := brokertest.Start(t, func(c *broker.Config) { c.Quota = 5 })
		addr := b.Addr()
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("address %q", addr)
		}
		conn, err = net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("broker not listening: %v", err)
		}
	})
	// The test that started the broker has ended: its cleanup closed the
	// broker, which closes the connection opened meanwhile. (Dialing the
	// address again would not prove it: on a busy machine another test may
	// already listen on the freed port.)
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := conn.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still served after the test that started the broker ended: %v", err)
	}
}
