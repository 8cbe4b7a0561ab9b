package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

// adminFlags are --admin and --admin-token-file, on dev, run and broker,
// and for processes with rules --ready-allow-failed-rules and
// --otlp-endpoint.
type adminFlags struct {
	addr        string
	tokenFile   string
	allowFailed bool
	dev         bool    // ssrun dev's: on by default, its address published for status and why
	otlp        string  // --otlp-endpoint: the collector that gets a span per rule run (its host calls and writes as events) and the metrics
	otlpSample  float64 // --otlp-sample: the share of chains exported
}

// devAdminDefault is ssrun dev's --admin default: a free port on loopback.
const devAdminDefault = "127.0.0.1:0"

func (f *adminFlags) register(cmd *cobra.Command, rules bool) {
	fs := cmd.Flags()
	f.otlpSample = 1 // its default also where it is not a flag (broker)
	if cmd.Name() == "dev" {
		f.dev = true
		fs.StringVar(&f.addr, "admin", devAdminDefault, "serve /healthz, /readyz, /metrics, /status, /why on HOST:PORT (:PORT or PORT: on 127.0.0.1; default a free port on 127.0.0.1, which ssrun status and why find; off: none)")
	} else {
		fs.StringVar(&f.addr, "admin", "", "serve /healthz, /readyz, /metrics and the web console at / (and with rules /status, /why) on HOST:PORT (:PORT or PORT: on 127.0.0.1; default off)")
	}
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "a `FILE` holding the bearer token the console (and /status, /why) require (needed with --admin off loopback)")
	if rules {
		fs.BoolVar(&f.allowFailed, "ready-allow-failed-rules", false, "with --admin, report ready even if some rule files failed to load")
		fs.StringVar(&f.otlp, "otlp-endpoint", "", "with --admin, send a span per rule run, its host calls and writes as events (one trace per chain), and the metrics to this OpenTelemetry collector (OTLP/HTTP: http://HOST:PORT; default off)")
		fs.Float64Var(&f.otlpSample, "otlp-sample", 1, "with --otlp-endpoint, the `RATIO` of chains whose traces are sent, each whole or not at all (0 < RATIO <= 1)")
	}
}

// minAdminToken is the shortest admin token accepted.
const minAdminToken = 16

// readAdminToken reads the admin endpoint's bearer token from file: its
// content without surrounding white space, at least minAdminToken bytes of
// printable ASCII (it travels in an HTTP header).
func readAdminToken(file string) (string, error) {
	b, err := readSecretFile(file)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if i := strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }); i >= 0 {
		return "", fmt.Errorf("admin token file %s: the token must be printable ASCII without spaces (it goes in an HTTP header); byte %d is not", file, i)
	}
	if len(tok) < minAdminToken {
		return "", fmt.Errorf("admin token file %s: the token is %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64 > %s)", file, len(tok), minAdminToken, file)
	}
	return tok, nil
}

// adminParts are what a process serves, each a readiness check from the
// start: an embedded broker, rules on a store client.
type adminParts struct{ broker, rules bool }

// adminRun is the admin endpoint of one command, or nil when --admin is
// not given: every method of a nil *adminRun does nothing.
type adminRun struct {
	srv       *admin.Server
	unpublish func() // removes the address ssrun dev published
	metrics   *admin.Metrics
	rules     *admin.RulesReady
	console   *admin.Console // the web console's memory (nil: a broker alone)
	otlp      *admin.OTLP    // nil without --otlp-endpoint
	log       *slog.Logger
	client    atomic.Pointer[protocol.Client]
	host      atomic.Pointer[host.Host]
	brokerUp  atomic.Bool
	broker    atomic.Pointer[broker.Broker] // a broker alone's, for its console
}

// startAdmin starts the endpoint when --admin is set. Its readiness checks
// are in place before it listens, so it is not ready until the parts say
// so: brokerStarted, withClient and rulesLoaded.
func (a *app) startAdmin(ctx context.Context, f *adminFlags, parts adminParts) (*adminRun, error) {
	if f.addr == "" || f.dev && f.addr == "off" {
		if f.tokenFile != "" {
			return nil, usageError("%s goes with --admin", a.flagSource("admin-token-file"))
		}
		if f.otlp != "" {
			return nil, usageError("%s goes with --admin", a.flagSource("otlp-endpoint"))
		}
		if f.otlpSample != 1 {
			return nil, usageError("%s goes with --otlp-endpoint", a.flagSource("otlp-sample"))
		}
		return nil, nil
	}
	var token string
	if f.tokenFile != "" {
		var err error
		if token, err = readAdminToken(f.tokenFile); err != nil {
			return nil, usageError("%s: %v", a.flagSource("admin-token-file"), err)
		}
	}
	srv, err := admin.New(admin.Config{Addr: f.addr, Logger: a.log, Token: token})
	if err != nil {
		return nil, usageError("--admin: %v", err)
	}
	r := &adminRun{srv: srv, metrics: admin.NewMetrics(), rules: &admin.RulesReady{AllowFailed: f.allowFailed}, log: a.log}
	srv.HandleOpen("GET /metrics", r.metrics.Handler())
	if parts.broker {
		srv.ReadyCheck("broker", func() error {
			if !r.brokerUp.Load() {
				return errors.New("the broker is not listening yet")
			}
			return nil
		})
	}
	if parts.broker && !parts.rules {
		admin.RegisterBrokerConsole(srv, func() admin.BrokerSource {
			if b := r.broker.Load(); b != nil {
				return b
			}
			return nil
		})
	}
	if parts.rules {
		srv.ReadyCheck("store", func() error {
			c := r.client.Load()
			if c == nil {
				return errors.New("no state store client yet")
			}
			return admin.StoreReady(c)()
		})
		srv.ReadyCheck("rules", r.rules.Check)
		srv.Handle("GET /status", r.withHost(func(h *host.Host) http.Handler { return admin.StatusHandler(h) }))
		srv.Handle("GET /why", r.withHost(func(h *host.Host) http.Handler { return admin.WhyHandler(h) }))
		r.console = admin.NewConsole(admin.ConsoleConfig{})
		r.console.Register(srv, r.consoleSource, r.keySource)
		if f.otlp == "" && f.otlpSample != 1 {
			return nil, usageError("%s goes with --otlp-endpoint", a.flagSource("otlp-sample"))
		}
		if f.otlp != "" {
			if _, _, err := admin.ParseOTLPEndpoint(f.otlp); err != nil {
				return nil, usageError("%s: %v", a.flagSource("otlp-endpoint"), err)
			}
			if !(f.otlpSample > 0 && f.otlpSample <= 1) {
				return nil, usageError("%s %v: want a ratio above 0, at most 1", a.flagSource("otlp-sample"), f.otlpSample)
			}
			if r.otlp, err = admin.NewOTLP(ctx, admin.OTLPConfig{Endpoint: f.otlp, Sample: f.otlpSample, Metrics: r.metrics, Logger: a.log}); err != nil {
				return nil, err
			}
			r.otlp.Attach(r.console)
		}
	}
	if err := srv.Start(ctx); err != nil {
		if r.otlp != nil {
			_ = r.otlp.Close(ctx) // nothing was sent
		}
		if errors.Is(err, admin.ErrTokenRequired) {
			return nil, usageError("%s: %v\ngive the endpoint a token with --admin-token-file FILE (or %s), or listen on loopback (--admin %s)",
				a.flagSource("admin"), err, envName("admin-token-file"), loopbackPort(srv.Addr()))
		}
		return nil, err
	}
	what := "/metrics, /healthz, /readyz"
	if parts.rules {
		what += ", /status, /why, the console at /"
	} else {
		what += ", the console at / (keys, clients)"
	}
	if token != "" {
		what += " (with the token)"
	}
	fmt.Fprintf(a.stdout, "ssrun: admin endpoint on http://%s (%s)\n", srv.Addr(), what)
	r.unpublish = func() {}
	if f.dev {
		var problem error
		if r.unpublish, problem = publishDevAdmin(srv.Addr()); problem != nil {
			a.log.Warn("ssrun status and why will not find this endpoint without --admin", "err", problem)
		} else {
			fmt.Fprintln(a.stdout, "ssrun: `ssrun status` and `ssrun why KEY` find it without --admin")
		}
	}
	return r, nil
}

// loopbackPort is the port of addr (HOST:PORT), which --admin takes alone
// for an endpoint on 127.0.0.1.
func loopbackPort(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// close stops the endpoint (requests in progress get a moment to finish).
func (r *adminRun) close() {
	if r == nil {
		return
	}
	r.unpublish()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	_ = r.srv.Close(ctx)
	if r.otlp != nil {
		if err := r.otlp.Close(ctx); err != nil {
			r.log.Warn("the last spans and metrics were not sent", "err", err)
		}
	}
}

// requestObserver is for protocol.Config.Observer (nil without --admin).
func (r *adminRun) requestObserver() protocol.Observer {
	if r == nil {
		return nil
	}
	return r.metrics
}

// handleObserver is for host.Config.Observer (nil without --admin).
func (r *adminRun) handleObserver() host.Observer {
	if r == nil {
		return nil
	}
	return r.metrics
}

// handleTracer is for host.Config.Tracer: the console (nil without
// --admin).
func (r *adminRun) handleTracer() host.Tracer {
	if r == nil || r.console == nil {
		return nil
	}
	return r.console
}

// consoleSource is the host once its rules are loaded, else nil.
func (r *adminRun) consoleSource() admin.ConsoleSource {
	if h := r.host.Load(); h != nil {
		return h
	}
	return nil
}

// keySource is the store client once there is one, else nil.
func (r *adminRun) keySource() admin.KeySource {
	if c := r.client.Load(); c != nil {
		return c
	}
	return nil
}

// brokerStarted shows b's metrics and marks it listening.
func (r *adminRun) brokerStarted(b *broker.Broker) {
	if r == nil {
		return
	}
	r.metrics.WatchBroker(b)
	r.broker.Store(b)
	r.brokerUp.Store(true)
}

// withClient shows the store client's metrics and makes readiness follow
// its connection.
func (r *adminRun) withClient(c *protocol.Client) {
	if r == nil {
		return
	}
	r.metrics.WatchClient(c)
	r.client.Store(c)
}

// rulesLoaded shows the host's metrics once its first load is done, and
// makes readiness follow its rules.
func (r *adminRun) rulesLoaded(h *host.Host) {
	if r == nil {
		return
	}
	r.metrics.WatchHost(h)
	r.rules.Loaded(h)
	r.host.Store(h)
}

// withHost serves what handler makes of the host once its rules are
// loaded, and 503 until then.
func (r *adminRun) withHost(handler func(*host.Host) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h := r.host.Load()
		if h == nil {
			http.Error(w, "the rules are not loaded yet", http.StatusServiceUnavailable)
			return
		}
		handler(h).ServeHTTP(w, req)
	})
}
