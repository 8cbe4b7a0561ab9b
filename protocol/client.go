// Package protocol is ssrun's client of the Azure IoT Operations state store
// over MQTT5 (statestore-protocol.md): one autopaho connection, requests
// pipelined and matched to responses by 16-byte correlation ids, key change
// notifications and connection changes delivered as one ordered event stream.
//
// A Client keeps reconnecting until Close. On every connection it subscribes
// to its response topic and notification filter, re-sends KEYNOTIFY for every
// key registered through it, and only then emits EventConnected, so a caller
// that re-reads its watched keys on EventConnected misses no change.
//
// Calls never wait for a connection: a call made while disconnected fails at
// once with ErrNotConnected, and calls pending when the connection drops fail
// with ErrConnectionLost. A call that fails with ErrTimeout or
// ErrConnectionLost may or may not have been applied by the store. A call
// whose request would be larger than the Maximum Packet Size the broker
// announced in its CONNACK fails at once with a *TooLargeError (ErrTooLarge)
// and is not sent: the broker would drop the connection for it.
package protocol

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/wire"
)

// Defaults applied to a zero Config field.
const (
	DefaultKeepAlive   = 60 // seconds
	DefaultTimeout     = 10 * time.Second
	DefaultEventBuffer = 65536
)

// Config configures a Client. The zero value of every optional field is the
// documented default.
type Config struct {
	// Servers are tried in order on every connection attempt:
	// "mqtt://host:port", "mqtts://host:port", or "host:port" (= mqtt).
	Servers []string
	// ClientID is the MQTT client id; "ssrun-<random hex>" when empty.
	ClientID string
	// TLS configures mqtts connections; nil means the system roots and the
	// server name taken from the address.
	TLS *tls.Config
	// CleanStart is sent on the first connection only (autopaho semantics);
	// reconnects always try to resume the session.
	CleanStart bool
	// KeepAlive in seconds; 60 when zero.
	KeepAlive uint16
	// SessionExpiry in seconds (0: the session ends with the connection).
	SessionExpiry uint32
	// Credentials, when set, is called before EVERY connection attempt, so a
	// rotated password file or Kubernetes service account token (K8S-SAT
	// enhanced auth) is re-read. An error skips that attempt.
	Credentials func() (Credentials, error)
	// Timeout is the default per-call timeout; 10 s when zero.
	Timeout time.Duration
	// Logger receives the client's logs; slog.Default() when nil, as in
	// every ssrun package (pass slog.New(slog.DiscardHandler) to discard).
	Logger *slog.Logger
	// EventBuffer bounds the queue of undelivered events (default 65536).
	// Notifications beyond it are dropped, counted in Stats.EventsDropped,
	// logged, and reported by an EventOverflow event; connection events are
	// never dropped.
	EventBuffer int
	// Now is the clock of the client's HLC (tests); time.Now when nil.
	Now func() time.Time
	// ReconnectBackoff is the delay before connection attempt n (n = 0 is
	// the first attempt after a loss and should be 0). Nil means a capped,
	// jittered exponential backoff: 250 ms to 1 s at first, doubling, at most
	// 30 s.
	ReconnectBackoff func(attempt int) time.Duration
	// Observer, when set, is told how every request ended and how long it
	// took (see Observer); nil costs nothing.
	Observer Observer
}

// Credentials authenticate one connection attempt. AuthMethod and AuthData,
// when set, go into the CONNECT packet for MQTT5 enhanced authentication
// (e.g. AuthMethod "K8S-SAT" with the token as AuthData).
type Credentials struct {
	Username   string
	Password   []byte
	AuthMethod string
	AuthData   []byte
}

// Stats are cumulative counters of a Client.
type Stats struct {
	Requests             uint64 // requests published
	Responses            uint64 // responses matched to a pending call
	Timeouts             uint64 // calls that ended on their timeout or their context's deadline
	NotConnected         uint64 // calls failed fast with ErrNotConnected
	ConnectionLost       uint64 // calls failed because their connection dropped
	UnmatchedResponses   uint64 // responses with no pending call (late, after a timeout, or duplicate)
	Notifications        uint64 // valid notifications received (EventsDropped of them were then dropped)
	DuplicatesSuppressed uint64 // notifications equal to the last one of their key
	NotificationsDropped uint64 // malformed notifications, without __ts, or too far ahead
	NotificationsEarly   uint64 // notifications that came before the connection was ready (dropped: the resync covers them)
	EventsDropped        uint64 // notifications dropped because the event queue was full
	Connections          uint64 // connections made ready (subscribed)
	Reconnects           uint64 // connections after the first
	Pending              int    // calls waiting for a response now
}

type counters struct {
	requests, responses, timeouts, notConnected, connectionLost atomic.Uint64
	unmatched                                                   atomic.Uint64
	notifications, duplicatesSuppressed, notificationsDropped   atomic.Uint64
	notificationsEarly                                          atomic.Uint64
	connections                                                 atomic.Uint64
}

// Client is a state store client. Its methods are safe for concurrent use.
type Client struct {
	cfg          Config
	clientID     string
	respTopic    string
	notifyFilter string
	notifyPrefix string
	log          *slog.Logger
	clock        *hlc.Clock
	cm           *autopaho.ConnectionManager // set once New returns; use conn.cm before
	local        Local                       // the in-process store of a NewLocal client (cm is nil)

	ctx    context.Context // ends on Close or when New's context ends
	cancel context.CancelCauseFunc

	pmu     sync.Mutex
	pending map[[16]byte]chan *paho.Publish

	// mu guards the connection state.
	mu        sync.Mutex
	up        *conn         // connection reported up by autopaho, nil when down
	ready     *conn         // up and subscribed: calls may use it
	readyCh   chan struct{} // closed while ready != nil
	lastCause error         // why the current connection ended, if known
	// refusal is the CONNACK refusal of the last connection attempt, nil
	// when that attempt failed otherwise or a connection came up since;
	// refusedCh is closed while it is one retrying cannot fix (Permanent).
	// said holds the refusals logged since the last connection, so each
	// is logged once.
	refusal   *RefusedError
	refusedCh chan struct{}
	said      map[string]bool
	lastUser  string // the user name of the last CONNECT

	// rmu guards the KEYNOTIFY registrations and the duplicate filter.
	rmu     sync.Mutex
	watched map[string]*lastNotify

	events *eventQueue
	stats  counters

	wg        sync.WaitGroup // setup goroutines
	done      chan struct{}  // closed once every goroutine of the client ended
	closeOnce sync.Once
	closeErr  error
}

// conn is one MQTT connection's lifetime, or one to an in-process store.
type conn struct {
	cm        *autopaho.ConnectionManager // nil for a Local store
	local     LocalConn                   // nil over MQTT
	ctx       context.Context             // cancelled when the connection goes down
	cancel    context.CancelCauseFunc
	connected bool // EventConnected was emitted for it (guarded by Client.mu)
	// maxPacket is the Maximum Packet Size of the broker's CONNACK; 0 when
	// it announced none (the protocol's own bound only).
	maxPacket int
}

// New validates cfg and starts connecting in the background; it does not
// wait for a connection (see AwaitConnection). The client lives until Close
// or until ctx ends; Close must be called in either case.
func New(ctx context.Context, cfg Config) (*Client, error) {
	urls, err := parseServers(cfg.Servers)
	if err != nil {
		return nil, err
	}
	c, err := newClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg = c.cfg
	pahoLog := slogPrinter{c.log}
	acfg := autopaho.ClientConfig{
		ServerUrls:                    urls,
		TlsCfg:                        cfg.TLS,
		KeepAlive:                     cfg.KeepAlive,
		CleanStartOnInitialConnection: cfg.CleanStart,
		SessionExpiryInterval:         cfg.SessionExpiry,
		ReconnectBackoff:              cfg.ReconnectBackoff,
		ConnectPacketBuilder:          c.buildConnect,
		OnConnectionUp:                c.onConnectionUp,
		OnConnectionDown:              c.onConnectionDown,
		OnConnectError:                c.onConnectError,
		Errors:                        pahoLog,
		PahoErrors:                    pahoLog,
		ClientConfig: paho.ClientConfig{
			ClientID:          cfg.ClientID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){c.onPublish},
			OnClientError:     func(err error) { c.recordCause(err) },
			OnServerDisconnect: func(d *paho.Disconnect) {
				reason := ""
				if d.Properties != nil {
					reason = d.Properties.ReasonString
				}
				c.recordCause(fmt.Errorf("server sent DISCONNECT (reason code 0x%02X) %s", d.ReasonCode, reason))
			},
			AuthHandler: authHandler{c},
			// Every call bounds its own wait with a context; paho's own
			// per-packet timeout must not cut a longer per-call timeout.
			PacketTimeout: 24 * time.Hour,
		},
	}
	cm, err := autopaho.NewConnection(c.ctx, acfg)
	if err != nil {
		c.cancel(ErrClosed)
		c.events.close()
		close(c.done)
		return nil, fmt.Errorf("protocol: start connection: %w", err)
	}
	c.cm = cm
	go c.stopped()
	return c, nil
}

// newClient validates cfg and makes a client without a transport yet.
func newClient(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.ClientID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ClientID = "ssrun-" + hex.EncodeToString(b[:])
	}
	if !utf8.ValidString(cfg.ClientID) || strings.ContainsRune(cfg.ClientID, 0) || len(cfg.ClientID) > 1024 {
		return nil, fmt.Errorf("protocol: client id %q must be valid UTF-8 without NUL, at most 1024 bytes", cfg.ClientID)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("protocol: negative timeout %v", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.EventBuffer < 0 {
		return nil, fmt.Errorf("protocol: negative event buffer %d", cfg.EventBuffer)
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = DefaultEventBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReconnectBackoff == nil {
		cfg.ReconnectBackoff = autopaho.NewExponentialBackoff(250*time.Millisecond, 30*time.Second, time.Second, 2)
	}
	c := &Client{
		cfg:          cfg,
		clientID:     cfg.ClientID,
		respTopic:    wire.ResponseTopic(cfg.ClientID),
		notifyFilter: wire.NotifyFilter(cfg.ClientID),
		log:          cfg.Logger.With("client_id", cfg.ClientID),
		clock:        hlc.NewClock(uuidString(newUUID()), cfg.Now),
		pending:      map[[16]byte]chan *paho.Publish{},
		readyCh:      make(chan struct{}),
		refusedCh:    make(chan struct{}),
		said:         map[string]bool{},
		watched:      map[string]*lastNotify{},
		done:         make(chan struct{}),
	}
	c.notifyPrefix = strings.TrimSuffix(c.notifyFilter, "+")
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	c.events = newEventQueue(cfg.EventBuffer, c.log)
	return c, nil
}

// stopped waits for the client to stop (Close, or New's context ending):
// autopaho's connection manager first (no callback starts a goroutine after
// it), then the setup goroutines; then it closes Events and Done.
func (c *Client) stopped() {
	<-c.cm.Done()
	c.wg.Wait()
	c.events.close()
	close(c.done)
}

// parseServers turns Config.Servers into URLs for autopaho.
func parseServers(servers []string) ([]*url.URL, error) {
	if len(servers) == 0 {
		return nil, errors.New("protocol: no servers configured")
	}
	urls := make([]*url.URL, 0, len(servers))
	for _, s := range servers {
		raw := s
		if !strings.Contains(raw, "://") {
			raw = "mqtt://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("protocol: server %q: %w", s, err)
		}
		if u.Scheme != "mqtt" && u.Scheme != "mqtts" {
			return nil, fmt.Errorf("protocol: server %q: scheme %q is not mqtt or mqtts", s, u.Scheme)
		}
		if u.Hostname() == "" || u.Port() == "" {
			return nil, fmt.Errorf("protocol: server %q: want host:port", s)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("protocol: server %q: only scheme://host:port is allowed", s)
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// buildConnect completes the CONNECT of every attempt: fresh credentials and
// RequestProblemInfo=true (without it mochi strips every user property from
// the packets it sends this client; libraries.md §3).
func (c *Client) buildConnect(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
	if cp.Properties == nil {
		cp.Properties = &paho.ConnectProperties{}
	}
	cp.Properties.RequestProblemInfo = true
	if c.cfg.Credentials != nil {
		cr, err := c.cfg.Credentials()
		if err != nil {
			return nil, fmt.Errorf("protocol: read credentials: %w", err)
		}
		cp.Username, cp.UsernameFlag = cr.Username, cr.Username != ""
		c.mu.Lock()
		c.lastUser = cr.Username
		c.mu.Unlock()
		cp.Password, cp.PasswordFlag = cr.Password, len(cr.Password) > 0
		cp.Properties.AuthMethod, cp.Properties.AuthData = cr.AuthMethod, cr.AuthData
	}
	return cp, nil
}

// authHandler answers a server's AUTH challenge with the current
// credentials' auth data. paho requires a handler whenever a CONNACK carries
// an auth method.
type authHandler struct{ c *Client }

func (a authHandler) Authenticate(in *paho.Auth) *paho.Auth {
	out := &paho.Auth{ReasonCode: 0x18, Properties: &paho.AuthProperties{}} // continue authentication
	if in.Properties != nil {
		out.Properties.AuthMethod = in.Properties.AuthMethod
	}
	if a.c.cfg.Credentials != nil {
		if cr, err := a.c.cfg.Credentials(); err == nil {
			out.Properties.AuthData = cr.AuthData
		} else {
			a.c.log.Warn("reading credentials for an AUTH challenge failed", "err", err)
		}
	}
	return out
}

func (a authHandler) Authenticated() {}

// slogPrinter adapts paho's logger interface to slog at debug level.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	p.l.Debug(strings.TrimSpace(fmt.Sprintln(v...)), "component", "paho")
}

func (p slogPrinter) Printf(format string, v ...any) {
	p.l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "paho")
}

// recordCause remembers the first error paho reports for the current
// connection, for its EventDisconnected. paho reports it from a goroutine of
// its own, so it may come too late (then it is ignored) or not at all.
func (c *Client) recordCause(err error) {
	c.mu.Lock()
	if c.up != nil && c.lastCause == nil {
		c.lastCause = err
	}
	c.mu.Unlock()
}

// onConnectionUp runs on autopaho's goroutine and must not block: it starts
// the connection's setup in an owned goroutine.
func (c *Client) onConnectionUp(cm *autopaho.ConnectionManager, ack *paho.Connack) {
	ctx, cancel := context.WithCancelCause(c.ctx)
	cn := &conn{cm: cm, ctx: ctx, cancel: cancel}
	if ack.Properties != nil && ack.Properties.MaximumPacketSize != nil {
		cn.maxPacket = int(*ack.Properties.MaximumPacketSize)
	}
	c.mu.Lock()
	c.up = cn
	c.lastCause = nil
	c.setRefusal(nil)
	clear(c.said)
	c.mu.Unlock()
	c.log.Debug("mqtt connection up", "session_present", ack.SessionPresent)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.setup(cn)
	}()
}

// onConnectionDown runs on autopaho's goroutine and must not block. It fails
// the connection's pending calls (through its context) and emits
// EventDisconnected when EventConnected was emitted for the connection.
func (c *Client) onConnectionDown() bool {
	c.mu.Lock()
	cn := c.up
	cause := c.lastCause
	c.up, c.ready = nil, nil
	select {
	case <-c.readyCh:
		c.readyCh = make(chan struct{})
	default:
	}
	err := ErrConnectionLost
	if cause != nil {
		err = fmt.Errorf("%w: %w", ErrConnectionLost, cause)
	}
	if cn != nil {
		cn.cancel(err)
		if cn.connected {
			c.events.push(Event{Kind: EventDisconnected, Err: err})
		}
	}
	c.mu.Unlock()
	c.log.Warn("state store connection lost", "err", err)
	return c.ctx.Err() == nil
}

// setup prepares a new connection: subscribe, mark it ready for calls,
// re-register every watched key, then emit EventConnected.
func (c *Client) setup(cn *conn) {
	if cn.cm != nil && !c.subscribe(cn) {
		return
	}
	c.mu.Lock()
	if c.up != cn {
		c.mu.Unlock()
		return
	}
	c.ready = cn
	close(c.readyCh)
	c.mu.Unlock()
	if c.stats.connections.Add(1) > 1 {
		c.log.Info("state store connection re-established")
	} else {
		c.log.Info("state store connected")
	}

	c.reregister(cn)

	c.mu.Lock()
	if c.up == cn {
		cn.connected = true
		c.events.push(Event{Kind: EventConnected})
	}
	c.mu.Unlock()
}

// subscribe subscribes to the response topic (required; retried until it
// works or the connection ends) and the notification filter (best effort: an
// AIO broker pushes notifications without it). It reports whether the
// connection is still usable.
func (c *Client) subscribe(cn *conn) bool {
	delay := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(cn.ctx, c.cfg.Timeout)
		ack, err := cn.cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: c.respTopic, QoS: 1, NoLocal: true},
			{Topic: c.notifyFilter, QoS: 1},
		}})
		cancel()
		if ack != nil && len(ack.Reasons) == 2 && ack.Reasons[0] < 0x80 {
			if ack.Reasons[1] >= 0x80 {
				c.log.Warn("subscribing to the notification filter failed; relying on the broker pushing notifications",
					"filter", c.notifyFilter, "reason_code", ack.Reasons[1])
			}
			return true
		}
		if cn.ctx.Err() != nil {
			return false
		}
		if ack != nil && len(ack.Reasons) > 0 {
			err = fmt.Errorf("SUBACK reason code 0x%02X", ack.Reasons[0])
		}
		c.log.Error("subscribing to the response topic failed; calls cannot work until it succeeds",
			"topic", c.respTopic, "err", err, "retry_in", delay)
		select {
		case <-cn.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// reregister re-sends KEYNOTIFY for every watched key, up to 64 at a time.
func (c *Client) reregister(cn *conn) {
	c.rmu.Lock()
	keys := make([]string, 0, len(c.watched))
	for k := range c.watched {
		keys = append(keys, k)
	}
	c.rmu.Unlock()
	if len(keys) == 0 {
		return
	}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, k := range keys {
		if cn.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			key := []byte(k)
			if _, err := c.call(cn.ctx, cmdKeyNotify, key, [][]byte{bKeyNotify, key}, callOpts{}); err != nil {
				c.log.Warn("re-registering KEYNOTIFY failed", "key", keyText(key), "err", err)
				return
			}
			// KeyNotifyStop may have run meanwhile: undo what we just did.
			c.rmu.Lock()
			_, still := c.watched[k]
			c.rmu.Unlock()
			if !still {
				if _, err := c.call(cn.ctx, cmdKeyNotifyStop, key, [][]byte{bKeyNotify, key, bStop}, callOpts{}); err != nil {
					c.log.Warn("undoing KEYNOTIFY of a key no longer watched failed", "key", keyText(key), "err", err)
				}
			}
		}()
	}
	wg.Wait()
	c.log.Debug("re-registered watched keys", "count", len(keys))
}

// MaxPacketSize returns the Maximum Packet Size the broker announced in the
// CONNACK of the current connection: requests whose packet would be larger
// fail with a *TooLargeError, unsent. It is 0 when the broker announced no
// limit; ok is false while the client has no connection calls may use (the
// limit is not known then, and may differ on the next connection).
func (c *Client) MaxPacketSize() (size int, ok bool) {
	cn := c.readyConn()
	if cn == nil {
		return 0, false
	}
	return cn.maxPacket, true
}

// readyConn returns the connection calls may use, or nil.
func (c *Client) readyConn() *conn {
	c.mu.Lock()
	cn := c.ready
	c.mu.Unlock()
	return cn
}

// AwaitConnection blocks until the client is connected and subscribed (so
// calls can be made), ctx ends, or the client is closed. A refused
// connection attempt does not end the wait: the client keeps trying (see
// AwaitConnectionOrRefusal).
func (c *Client) AwaitConnection(ctx context.Context) error {
	return c.awaitConnection(ctx, false)
}

// AwaitConnectionOrRefusal is AwaitConnection for a one-shot command: it
// also returns, with the *RefusedError, as soon as the broker refuses the
// connection for a reason trying again cannot fix (RefusedError.Permanent:
// bad credentials, a client id not allowed, not authorized, banned). The
// client itself keeps trying until Close.
func (c *Client) AwaitConnectionOrRefusal(ctx context.Context) error {
	return c.awaitConnection(ctx, true)
}

func (c *Client) awaitConnection(ctx context.Context, refusal bool) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.mu.Lock()
	ch, refused := c.readyCh, c.refusedCh
	c.mu.Unlock()
	if !refusal {
		refused = nil // never ready
	}
	select {
	case <-ch:
		return nil
	case <-refused:
		if r := c.LastRefusal(); r != nil {
			return fmt.Errorf("protocol: connect: %w", r)
		}
		return c.awaitConnection(ctx, refusal) // a connection came up meanwhile
	case <-ctx.Done():
		if r := c.LastRefusal(); r != nil {
			return fmt.Errorf("protocol: await connection: %w (the last attempt: %w)", ctx.Err(), r)
		}
		return fmt.Errorf("protocol: await connection: %w", ctx.Err())
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// LastRefusal returns the CONNACK refusal of the client's latest connection
// attempt: nil when that attempt failed for another reason (the broker did
// not answer), or when the client has connected since.
func (c *Client) LastRefusal() *RefusedError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusal
}

// setRefusal records the outcome of a connection attempt (r nil: not a
// refusal) and opens or closes refusedCh. Under mu.
func (c *Client) setRefusal(r *RefusedError) {
	c.refusal = r
	select {
	case <-c.refusedCh:
		if r == nil || !r.Permanent() {
			c.refusedCh = make(chan struct{})
		}
	default:
		if r != nil && r.Permanent() {
			close(c.refusedCh)
		}
	}
}

// onConnectError runs on autopaho's goroutine for every failed connection
// attempt; autopaho tries again after ReconnectBackoff. A refusal is logged
// once per distinct reason until the client connects (the same refusal
// every few seconds says nothing new), other failures every time.
func (c *Client) onConnectError(err error) {
	r := asRefusal(err)
	c.mu.Lock()
	if r != nil {
		r.ClientID, r.Username = c.clientID, c.lastUser
	}
	c.setRefusal(r)
	first := false
	if r != nil && !c.said[r.Error()] {
		c.said[r.Error()], first = true, true
	}
	c.mu.Unlock()
	switch {
	case r == nil:
		c.log.Warn("state store connection attempt failed", "err", err)
	case first:
		c.log.Error("the broker refused the connection; trying again with backoff (said once per reason)", "user", r.Username, "err", r)
	default:
		c.log.Debug("the broker refused the connection again", "err", r)
	}
}

// Done is closed once the client has stopped, by Close or because the
// context given to New ended, and every goroutine of it has returned (the
// Events channel is closed by then). As autopaho's ConnectionManager.Done.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close disconnects (sending DISCONNECT on a live connection), fails pending
// calls with ErrClosed, waits for every goroutine of the client and closes
// the Events channel (undelivered events are discarded). Later calls fail
// with ErrClosed. It reports what kept it from ending the session cleanly:
// no connection to send DISCONNECT on (with the last connection error; the
// broker then ends the session on its own, after its expiry), or the client
// had already stopped because New's context ended. Close is idempotent and
// returns the same error every time.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		var err error
		c.mu.Lock()
		connected, cause := c.up != nil, c.lastCause
		c.mu.Unlock()
		switch {
		case c.ctx.Err() != nil:
			err = fmt.Errorf("the client had already stopped: %w", context.Cause(c.ctx))
		case !connected && cause != nil:
			err = fmt.Errorf("not connected, no DISCONNECT sent (last connection error: %w)", cause)
		case !connected:
			err = errors.New("not connected, no DISCONNECT sent")
		}
		c.cancel(ErrClosed)
		<-c.done
		if err != nil {
			c.closeErr = fmt.Errorf("protocol: close %s: %w", c.clientID, err)
		}
	})
	return c.closeErr
}

// ClientID returns the MQTT client id in use.
func (c *Client) ClientID() string { return c.clientID }

// Now returns the client's hybrid logical clock: the last timestamp it
// issued or merged from the store (every response's and notification's
// version), without advancing it. Its wall time is never behind a version
// the client has seen; before any request it is zero.
func (c *Client) Now() hlc.HLC { return c.clock.Now() }

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() Stats {
	c.pmu.Lock()
	pending := len(c.pending)
	c.pmu.Unlock()
	s := &c.stats
	return Stats{
		Requests:             s.requests.Load(),
		Responses:            s.responses.Load(),
		Timeouts:             s.timeouts.Load(),
		NotConnected:         s.notConnected.Load(),
		ConnectionLost:       s.connectionLost.Load(),
		UnmatchedResponses:   s.unmatched.Load(),
		Notifications:        s.notifications.Load(),
		DuplicatesSuppressed: s.duplicatesSuppressed.Load(),
		NotificationsDropped: s.notificationsDropped.Load(),
		NotificationsEarly:   s.notificationsEarly.Load(),
		EventsDropped:        c.events.droppedTotal(),
		Connections:          s.connections.Load(),
		Reconnects:           max(s.connections.Load(), 1) - 1,
		Pending:              pending,
	}
}

// onPublish is the single OnPublishReceived handler. It runs on paho's one
// delivery goroutine and never blocks: responses go to their call's buffered
// channel, notifications to the bounded event queue.
func (c *Client) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	switch {
	case p.Topic == c.respTopic:
		c.deliverResponse(p)
		return true, nil
	case strings.HasPrefix(p.Topic, c.notifyPrefix):
		c.handleNotify(p)
		return true, nil
	}
	c.log.Debug("ignoring a message on an unexpected topic", "topic", p.Topic)
	return false, nil
}

func (c *Client) deliverResponse(p *paho.Publish) {
	var id [16]byte
	if p.Properties == nil || len(p.Properties.CorrelationData) != len(id) {
		c.stats.unmatched.Add(1)
		c.log.Debug("dropping a response without 16-byte correlation data")
		return
	}
	copy(id[:], p.Properties.CorrelationData)
	// Taking the entry out makes this the only send on its channel (so it
	// cannot block) and turns a second response into an unmatched one.
	c.pmu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	c.pmu.Unlock()
	if !ok {
		c.stats.unmatched.Add(1)
		c.log.Debug("dropping a response to no pending call (late or duplicate)", "correlation", hex.EncodeToString(id[:]))
		return
	}
	ch <- p
}

// newUUID returns random bytes of a version 4 UUID.
func newUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func uuidString(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// Reauthenticate sends the current enhanced-authentication credentials on
// the live connection (an MQTT 5 AUTH packet with reason 0x19,
// re-authenticate), for instance after a rotated Kubernetes service account
// token (K8S-SAT). Without a connection it returns ErrNotConnected: the next
// connection reads the credentials anyway.
func (c *Client) Reauthenticate(ctx context.Context) error {
	if c.cfg.Credentials == nil {
		return errors.New("protocol: reauthenticate: no credentials configured")
	}
	cr, err := c.cfg.Credentials()
	if err != nil {
		return fmt.Errorf("protocol: reauthenticate: read credentials: %w", err)
	}
	if cr.AuthMethod == "" {
		return errors.New("protocol: reauthenticate: the credentials name no authentication method")
	}
	cn := c.readyConn()
	if cn != nil && cn.cm == nil {
		return errors.New("protocol: reauthenticate: a client of an in-process store has no credentials")
	}
	if cn == nil {
		return ErrNotConnected
	}
	res, err := cn.cm.Authenticate(ctx, &paho.Auth{ReasonCode: 0x19, Properties: &paho.AuthProperties{AuthMethod: cr.AuthMethod, AuthData: cr.AuthData}})
	if err != nil {
		if errors.Is(err, autopaho.ConnectionDownError) {
			return ErrNotConnected
		}
		return fmt.Errorf("protocol: reauthenticate: %w", err)
	}
	if !res.Success {
		reason := ""
		if res.Properties != nil {
			reason = res.Properties.ReasonString
		}
		return fmt.Errorf("protocol: reauthenticate: refused by the broker (reason code 0x%02x %s)", res.ReasonCode, reason)
	}
	return nil
}
