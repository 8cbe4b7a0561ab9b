package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrTokenRequired refuses to start, without a token (Config.Token), an
// admin endpoint that shows data (/status, /why) on an address other hosts
// may reach.
var ErrTokenRequired = errors.New("an admin endpoint reachable from other hosts needs a token")

// Timeouts of the admin HTTP server: scrapes and probes are small requests
// answered at once, so a client that dawdles is cut off.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Config configures a Server.
type Config struct {
	// Addr is the --admin value: HOST:PORT, or :PORT or PORT for loopback
	// (see ListenAddr).
	Addr string
	// Logger for the server's own reports; slog.Default() when nil.
	Logger *slog.Logger
	// Listener, when set, is served instead of listening on Addr, which
	// still decides everything else (tests: a 127.0.0.1 listener for a
	// server configured for another address). Once started, Close closes
	// it.
	Listener net.Listener
	// Token, when not empty, is the bearer token that every endpoint added
	// with Handle (/status, /why: values, client ids, errors) requires:
	// `Authorization: Bearer TOKEN`, compared in constant time; a request
	// without it gets 401. /healthz, /readyz and what HandleOpen adds
	// (/metrics) stay open. Without a token, Start refuses an address
	// other hosts may reach (see Loopback) when Handle added anything.
	Token string
	// Now is the clock of the limit on wrong tokens (loginlimit.go):
	// time.Now when nil.
	Now func() time.Time
	// AuthFailures is how many wrong tokens an address may send in a
	// minute before it gets 429 (loginlimit.go); 0 is 10.
	AuthFailures int
}

// Server is the admin HTTP endpoint: /healthz and /readyz from the start,
// and whatever else is added with Handle (/status, /why) or HandleOpen
// (/metrics). Create it with New, add handlers and readiness checks, Start
// it, and Close it.
type Server struct {
	addr    string
	given   net.Listener // Config.Listener
	log     *slog.Logger
	mux     *http.ServeMux
	ready   readiness
	token   *[sha256.Size]byte // SHA-256 of Config.Token; nil without one
	private []string           // the paths added with Handle, for Start's refusal
	fails   *authFailures      // wrong tokens per address

	mu   sync.Mutex
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when the serving goroutine returns

	shutdown     chan struct{} // closed when Close starts
	shutdownOnce sync.Once
}

// New checks cfg.Addr and builds a Server with /healthz and /readyz.
func New(cfg Config) (*Server, error) {
	addr, err := ListenAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{addr: addr, given: cfg.Listener, log: cfg.Logger, mux: http.NewServeMux(), shutdown: make(chan struct{}),
		fails: newAuthFailures(cfg.Now, cfg.AuthFailures)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.Token != "" {
		sum := sha256.Sum256([]byte(cfg.Token))
		s.token = &sum
	}
	s.mux.Handle("GET /healthz", http.HandlerFunc(healthz))
	s.mux.Handle("GET /readyz", &s.ready)
	return s, nil
}

// Handle serves pattern (http.ServeMux syntax, e.g. "GET /status") with h,
// to requests that carry the token when there is one (Config.Token). Call
// it before Start.
func (s *Server) Handle(pattern string, h http.Handler) {
	_, path, _ := strings.Cut(pattern, " ")
	s.private = append(s.private, path)
	s.mux.Handle(pattern, ownSite(s.authorized(h)))
}

// ownSite serves h to every request but those a page of another site
// made its visitor's browser send (Fetch Metadata: Sec-Fetch-Site
// cross-site or same-site, another port of the same host included), which
// get 403: such a page could not read the answers, but could hold the live
// streams or have the store scanned again and again. A link to a page (a
// navigation) is served, and so are the console's own requests
// (same-origin) and programs' (no such header).
func ownSite(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch site := r.Header.Get("Sec-Fetch-Site"); site {
		case "cross-site", "same-site":
			if r.Header.Get("Sec-Fetch-Mode") != "navigate" || r.Method != http.MethodGet {
				writeJSON(w, http.StatusForbidden, ErrorDoc{Error: r.Method + " " + r.URL.Path + ": refused: a page of another site asked for it (Sec-Fetch-Site: " +
					site + "); open the console at its own address"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// HandleOpen serves pattern with h to every request, token or not: for
// what shows nothing of the data (/metrics, for scrapers that carry no
// token). Call it before Start.
func (s *Server) HandleOpen(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// authorized serves h to the requests that carry the server's token (all,
// without one), and answers the others 401, or 429 to an address that
// sent too many wrong tokens (loginlimit.go).
func (s *Server) authorized(h http.Handler) http.Handler {
	if s.token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src := source(r)
		if wait := s.fails.blocked(src); wait > 0 {
			tooManyFailures(w, wait)
			return
		}
		if ok, tried := s.carriesToken(r); !ok {
			if tried {
				s.fails.fail(src)
			}
			if _, err := r.Cookie(tokenCookie); err == nil {
				// A stale cookie (the token changed) is dropped, lest the
				// page's every request count against the limit.
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="ssrun admin"`)
			if wantsPage(r) {
				loginPage(w, r.URL.Path)
				return
			}
			writeJSON(w, http.StatusUnauthorized, ErrorDoc{Error: "missing or wrong bearer token: " + r.URL.Path +
				" needs the token of the admin endpoint (Authorization: Bearer TOKEN; ssrun status and why: --admin-token-file)"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// carriesToken reports whether r carries the server's token: in the
// Authorization header (Bearer), or in the console's cookie (see
// consoleauth.go), compared in constant time; tried is whether it carries
// any (an Authorization header, the cookie).
func (s *Server) carriesToken(r *http.Request) (ok, tried bool) {
	auth := r.Header.Get("Authorization")
	if scheme, token, _ := strings.Cut(auth, " "); strings.EqualFold(scheme, "Bearer") {
		return s.tokenIs(strings.TrimSpace(token)), true
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return s.tokenIs(c.Value), true
	}
	return false, auth != ""
}

// tokenIs compares token with the server's in constant time.
func (s *Server) tokenIs(token string) bool {
	sum := sha256.Sum256([]byte(token)) // equal lengths: only equality shows
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// ShuttingDown is closed when Close starts: long answers (the console's
// live streams) end then, so that Close need not wait for them.
func (s *Server) ShuttingDown() <-chan struct{} { return s.shutdown }

// ReadyCheck adds a readiness check: /readyz answers 503 while check
// returns an error, naming the check and the error. Checks may be added
// at any time; with none, the server is ready.
func (s *Server) ReadyCheck(name string, check func() error) { s.ready.add(name, check) }

// Start listens on the address (or serves Config.Listener) in one
// goroutine that Close waits for. A port already in use fails here, and so
// does, before listening, an address other hosts may reach for a server
// with endpoints added by Handle but no token (ErrTokenRequired).
func (s *Server) Start(ctx context.Context) error {
	if s.token == nil && len(s.private) > 0 && !Loopback(s.addr) {
		slices.Sort(s.private)
		return fmt.Errorf("admin endpoint %s: %w: it would show %s (values, client ids, errors) to anyone who reaches it",
			s.addr, ErrTokenRequired, strings.Join(s.private, ", "))
	}
	ln := s.given
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", s.addr); err != nil {
			return fmt.Errorf("admin endpoint: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           s.guard(s.mux, ln.Addr().String()),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	if s.srv != nil {
		s.mu.Unlock()
		_ = ln.Close()
		return errors.New("admin endpoint: already started")
	}
	s.srv, s.ln, s.done = srv, ln, make(chan struct{})
	s.mu.Unlock()
	go func() {
		defer close(s.done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin endpoint stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	s.log.Info("admin endpoint listening", "addr", ln.Addr().String())
	return nil
}

// guard serves h to the requests a browser page of this endpoint, or a
// program, sends, and refuses with 403, before any handler, the two that
// a page of another site can make a browser send: a request to an
// endpoint on loopback for a name other than localhost (DNS rebinding: a
// page of evil.example, whose name came to resolve to 127.0.0.1, reading
// what the endpoint shows), and a cross-origin POST (another site's form
// posting wrong tokens to the login, to lock its visitor out: 429). An
// endpoint off loopback is reached by names of the operator's, and is
// guarded by its token. listening is the address served, for the message.
func (s *Server) guard(h http.Handler, listening string) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusForbidden, ErrorDoc{Error: r.Method + " " + r.URL.Path +
			": cross-origin request refused: it comes from a page of another site (Origin, Sec-Fetch-Site); open the console at http://" + listening + "/"})
	}))
	h = cop.Handler(h)
	if !Loopback(s.addr) {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !localName(r.Host) {
			writeJSON(w, http.StatusForbidden, ErrorDoc{Error: fmt.Sprintf("Host header %q refused: this admin endpoint listens on loopback and answers only requests for localhost or an IP address, "+
				"such as http://%s/ (a page of another site whose name resolves to 127.0.0.1 must not read it: DNS rebinding)", r.Host, listening)})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// localName reports whether hostport (a Host header) names no site a page
// could come from: an IP address, localhost or a name under .localhost
// (which browsers resolve to loopback themselves), with a port or none;
// or is empty (HTTP/1.0).
func localName(hostport string) bool {
	if hostport == "" {
		return true
	}
	u, err := url.Parse("http://" + hostport)
	if err != nil || u.Host != hostport || u.Hostname() == "" {
		return false
	}
	name := u.Hostname()
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// Addr returns the address listened on once started (with the port picked
// for port 0), else the address to listen on.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Close stops listening, lets requests in progress finish until ctx ends
// (then cuts them off), and waits for the serving goroutine. Closing a
// server that was not started, or again, does nothing.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	s.shutdownOnce.Do(func() { close(s.shutdown) })
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	<-done
	if err != nil {
		return fmt.Errorf("admin endpoint: close: %w", err)
	}
	return nil
}
