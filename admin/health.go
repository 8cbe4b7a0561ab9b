package admin

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// healthz answers 200 "ok" while the process serves: Kubernetes' liveness
// probe. It checks nothing else, on purpose: a store that is away is a
// reason not to be ready, not to be restarted.
func healthz(w http.ResponseWriter, _ *http.Request) {
	plain(w, http.StatusOK, "ok\n")
}

// readiness is /readyz: 200 "ok" when every check passes, else 503 with a
// line per check in the shape of Kubernetes' own endpoints ("[+]name ok",
// "[-]name failed: reason").
type readiness struct {
	mu     sync.Mutex
	checks []check
}

type check struct {
	name string
	fn   func() error
}

func (r *readiness) add(name string, fn func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, check{name, fn})
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	checks := append([]check(nil), r.checks...)
	r.mu.Unlock()
	var b strings.Builder
	failed := false
	for _, c := range checks {
		if err := c.fn(); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	if failed {
		b.WriteString("readyz check failed\n")
		plain(w, http.StatusServiceUnavailable, b.String())
		return
	}
	b.WriteString("ok\n")
	plain(w, http.StatusOK, b.String())
}

// plain writes a plain text answer that no cache keeps.
func plain(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
