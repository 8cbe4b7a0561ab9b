package admin

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Guessing the token is slowed per remote address: after maxAuthFailures
// wrong tokens (a bearer token, the console's cookie or the login form)
// within authWindow of the first, every request of that address that needs
// the token gets 429 with Retry-After until the window ends, without the
// token being looked at. A request carrying no token at all (a browser's
// first visit) is no failure. IPv6 addresses count per /64, which one host
// usually holds whole. The addresses kept are bounded: past
// maxAuthAddresses, new ones share one count.

const (
	maxAuthFailures  = 10 // by default (Config.AuthFailures)
	authWindow       = time.Minute
	maxAuthAddresses = 4096
)

// authFailures counts the wrong tokens of each address in its window.
type authFailures struct {
	now func() time.Time
	max int // failures in a window before 429

	mu    sync.Mutex
	addrs map[string]*failWindow
}

type failWindow struct {
	start time.Time // of the window's first failure
	n     int
}

func newAuthFailures(now func() time.Time, max int) *authFailures {
	if now == nil {
		now = time.Now
	}
	if max <= 0 {
		max = maxAuthFailures
	}
	return &authFailures{now: now, max: max, addrs: map[string]*failWindow{}}
}

// source is the address r's failures count against: its IP, an IPv6
// address's /64.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// blocked returns how long src must wait, 0 when it may try.
func (f *authFailures) blocked(src string) time.Duration {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.addrs[src]
	if w == nil && len(f.addrs) >= maxAuthAddresses {
		src, w = "", f.addrs[""] // a newcomer while full: the shared count
	}
	if w == nil {
		return 0
	}
	left := w.start.Add(authWindow).Sub(now)
	if left <= 0 {
		delete(f.addrs, src)
		return 0
	}
	if w.n < f.max {
		return 0
	}
	return left
}

// fail counts a wrong token of src.
func (f *authFailures) fail(src string) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.addrs[src]
	if w != nil && !now.Before(w.start.Add(authWindow)) {
		w = nil // its window ended: a new one
	}
	if w == nil {
		if len(f.addrs) >= maxAuthAddresses {
			for a, x := range f.addrs {
				if !now.Before(x.start.Add(authWindow)) {
					delete(f.addrs, a)
				}
			}
			if len(f.addrs) >= maxAuthAddresses {
				src = "" // still full: the newcomers share a count
				if w = f.addrs[src]; w != nil && now.Before(w.start.Add(authWindow)) {
					w.n++
					return
				}
			}
		}
		w = &failWindow{start: now}
		f.addrs[src] = w
	}
	w.n++
}

// tooManyFailures answers 429, to try again after wait.
func tooManyFailures(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	writeJSON(w, http.StatusTooManyRequests, ErrorDoc{Error: "too many wrong tokens from this address: try again in " +
		strconv.Itoa(int(math.Ceil(wait.Seconds()))) + " s"})
}
