// Package testnet holds network helpers for tests: a TCP proxy whose
// connections a test can cut and heal, to play a network partition, or
// delay, to play a slow network or a held-up request.
package testnet

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback address to a target. Cut
// closes every forwarded connection and refuses new ones until Heal.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every pipe

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	// delay holds every byte for this long after it was read, in both
	// directions; changed is closed (and replaced) when it changes, so
	// bytes held under the old delay are sent by the new one.
	delay   time.Duration
	changed chan struct{}
}

// NewProxy starts a proxy to target on a random loopback port. It is closed,
// and its goroutines waited for, when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the address clients dial to reach the target through the proxy.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst, each chunk held for the delay, until either
// side ends, then closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		b    []byte
		read time.Time
	}
	q := make(chan chunk, 256)
	sent := make(chan struct{})
	go func() { // the writer: order kept, each chunk sent once its delay is over
		defer close(sent)
		failed := false
		for c := range q {
			if failed {
				continue // drain: the reader stops at the closed connection
			}
			p.hold(c.read)
			if _, err := dst.Write(c.b); err != nil {
				failed = true
				_ = src.Close()
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{append([]byte(nil), buf[:n]...), time.Now()}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-sent
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// hold waits until the delay after read is over (the delay in force, which
// may change meanwhile), or the proxy is cut.
func (p *Proxy) hold(read time.Time) {
	for {
		p.mu.Lock()
		wait, changed, down := time.Until(read.Add(p.delay)), p.changed, p.down
		p.mu.Unlock()
		if wait <= 0 || down {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
		}
		t.Stop()
	}
}

// Delay holds every byte read from now on, in both directions, for d
// before it is forwarded (bytes keep their order); Delay(0) ends it and
// forwards at once what is held. A long delay holds a connection's
// requests until the test releases them, as a network that delivers them
// late.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
	close(p.changed)
	p.changed = make(chan struct{})
}

// Cut closes every forwarded connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	close(p.changed) // held bytes are dropped
	p.changed = make(chan struct{})
}

// Heal lets new connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}
