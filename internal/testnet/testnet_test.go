package testnet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer echoes every line on a random loopback port until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// roundTrip dials addr, sends a line and reads it back.
func roundTrip(t *testing.T, addr string) (net.Conn, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err) // the proxy's listener accepts even when cut
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return c, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("echo through the proxy: %q", line)
	}
	notTimeout(t, err)
	return c, err
}

// notTimeout fails the test if err is the 10 s deadline: a cut connection
// must be closed, not left hanging.
func notTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("timed out: %v", err)
	}
}

func TestProxyCutAndHeal(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	live, err := roundTrip(t, p.Addr())
	if err != nil {
		t.Fatalf("before the cut: %v", err)
	}

	p.Cut()
	// The live connection is closed by the proxy: reading it ends.
	_, err = live.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("read on a cut connection succeeded, want it closed")
	}
	notTimeout(t, err)
	// A new one is accepted, then closed without reaching the target.
	if _, err := roundTrip(t, p.Addr()); err == nil {
		t.Fatal("a connection made while cut reached the target")
	}

	p.Heal()
	if _, err := roundTrip(t, p.Addr()); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

// Bytes sent while the proxy delays are held (here for an hour: a read
// meanwhile finds nothing) and forwarded in order once the delay ends.
func TestProxyDelayHoldsAndReleases(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c, err := roundTrip(t, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	p.Delay(time.Hour)
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("read %q while the proxy holds it for an hour", line)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p.Delay(0)
	if _, err := c.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"held\n", "after\n"} {
		line, err := r.ReadString('\n')
		notTimeout(t, err)
		if err != nil || line != want {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
}
