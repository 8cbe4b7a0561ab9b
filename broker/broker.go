// Package broker is ssrun's embedded MQTT5 broker (mochi-mqtt) with the Azure
// IoT Operations state store answering inside it, faithful enough that the
// official SDKs work unchanged against it (statestore-protocol.md §16).
//
// Requests published QoS 1 to wire.RequestTopic are executed synchronously
// in the broker and answered on their response topic through an internal
// client; they are never forwarded to subscribers. Notifications are written
// straight into the registered client's session, with or without a matching
// subscription (§13.4). Keys expire actively.
//
// State lives in memory unless Config.DataDir names a data directory: then
// every change is appended to a write-ahead journal before it is applied,
// replies and notifications leave only once the change is durable under the
// fsync policy (FsyncPolicy; group commit), snapshots replace the journal as
// it grows, and a restart (clean, or after kill -9) recovers keys, values,
// versions, expiry deadlines and fencing tokens, with the clock never going
// back. A journal and snapshots rather than an embedded database: the store
// is in memory already and needs only an ordered durable log of its changes,
// which costs one write(2) per change and one fsync per group of changes.
// persist.go has the design and its guarantees.
//
// Access is safe by default: on a loopback address the broker may run open;
// elsewhere New refuses to start without a password file unless Insecure is
// set. With a password file (or an ACL file, or Authorize) clients are
// authorized too: see acl.go.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/ssrun/ssrun/store"
)

// DefaultListen is the address used when Config.Listen is empty.
const DefaultListen = "127.0.0.1:1883"

// DefaultQuota is the key quota used when Config.Quota is zero.
const DefaultQuota = 1_000_000

// DefaultMaxBytes is the byte quota used when Config.MaxBytes is zero.
const DefaultMaxBytes = 256 << 20

// MaxPacketSize is the largest MQTT packet (in bytes) the broker accepts; it
// is announced in CONNACK. A client sending more is disconnected (reason
// 0x95). 4 MiB leaves ample room for the largest values the SDK tests use
// (65 KB) while bounding what one packet can make the broker allocate. It
// is the store's own bound on a request (store.MaxRequest), which its
// journal's records are sized for.
const MaxPacketSize = store.MaxRequest

// ErrConfig is wrapped by every configuration error New returns.
var ErrConfig = errors.New("broker: invalid config")

// closeGrace is how long Close lets mochi disconnect clients gracefully
// before it closes the remaining network connections itself.
const closeGrace = time.Second

// Config configures a Broker. The zero value is a valid, open broker on
// DefaultListen.
type Config struct {
	// Listen is the host:port to listen on; default DefaultListen.
	Listen string
	// Listener is an optional pre-bound listener that overrides Listen. The
	// Broker takes ownership and closes it in Close.
	Listener net.Listener
	// Quota is the maximum number of keys; a SET that would create a key
	// beyond it fails with "the quota has been exceeded". Zero means
	// DefaultQuota, negative means unlimited.
	Quota int
	// MaxBytes bounds the stored data: the sum over keys of key length,
	// value length and 128 bytes of bookkeeping. A SET that would grow the
	// store beyond it fails with "the quota has been exceeded" (smaller
	// updates and deletes still work). Zero means DefaultMaxBytes, negative
	// means unlimited.
	MaxBytes int64
	// PasswordFile, when set, names a file of `username:bcrypt-hash` lines
	// (htpasswd -B format; '#' comments and blank lines allowed); only those
	// users may connect. See HashPassword.
	PasswordFile string
	// Users are more users that may connect, with the password file's: name
	// -> bcrypt hash (HashPassword). A name may not be in both. `ssrun dev`
	// gives its own rules host a generated one this way.
	Users map[string][]byte
	// Insecure allows open access on a non-loopback address.
	Insecure bool
	// ACLFile, when set, names the ACL file (YAML, the shape of Azure IoT
	// Operations' BrokerAuthorization; docs/acl.example.yaml): which users
	// may connect with which client ids, publish and subscribe to which
	// topics, and read and write which keys. It is reloaded when it
	// changes; a file that does not load leaves the previous ACL in force.
	// Without PasswordFile, user names are taken as the clients claim them:
	// not secure.
	ACLFile string
	// Authorize enforces the default policy (acl.go) even without a
	// password file or an ACL file, with user names as claimed: each
	// client only on its own state store topics, client ids held by the
	// user who first used them. Authorization is always on with a
	// password file or an ACL file.
	Authorize bool
	// TLSCertFile and TLSKeyFile, when both set, make the listener TLS.
	TLSCertFile, TLSKeyFile string
	// Logger receives the broker's logs; default slog.Default(). mochi's own
	// logs go through it one level lower (its INFO becomes DEBUG).
	Logger *slog.Logger
	// Now is the store's clock (HLC wall time, PX deadlines, skew checks);
	// default time.Now.
	Now func() time.Time
	// ClientQueueBytes and ClientQueueLen bound what the store holds for
	// one connection (responses and notifications waiting to be written or
	// acknowledged); a client past either is disconnected with reason code
	// 0x97. DefaultClientQueueBytes / DefaultClientQueueLen when zero.
	ClientQueueBytes int
	ClientQueueLen   int
	// ConnectTimeout is how long a new connection may take to send CONNECT
	// before it is closed; DefaultConnectTimeout when zero, none when
	// negative.
	ConnectTimeout time.Duration
	// MaxSessionExpiry is the longest a session outlives its connection
	// (with its client id and its queued replies and notifications): a
	// client asking for more is told this one in its CONNACK
	// (sessionexpiry.go). DefaultMaxSessionExpiry when zero, no cap when
	// negative; whole seconds.
	MaxSessionExpiry time.Duration
	// OfflineQueueBytes bounds what sessions without a connection hold
	// together (replies and notifications queued or unacknowledged); past
	// it, the output of the sessions disconnected longest is dropped,
	// logged and counted (offline.go). DefaultOfflineQueueBytes when zero.
	OfflineQueueBytes int
	// MaxKeepAlive is the longest keepalive an MQTT 5 client gets: one
	// asking for none or more is told this one in its CONNACK, so that a
	// client that goes silent, or stops reading, is closed 1.5 keepalives
	// after its last packet (keepalive.go). DefaultMaxKeepAlive when zero,
	// no cap when negative; whole seconds.
	MaxKeepAlive time.Duration

	// DataDir, when set, keeps the store in this directory (created if
	// missing) across restarts and crashes; empty keeps it in memory. One
	// broker at a time may use a directory. See persist.go.
	DataDir string
	// Fsync is when journaled changes are forced to stable storage:
	// FsyncAlways (the zero value), FsyncInterval or FsyncNever.
	Fsync store.FsyncPolicy
	// FsyncInterval is the period of FsyncInterval; DefaultFsyncInterval
	// when zero.
	FsyncInterval time.Duration
	// SnapshotBytes is the journal size at which a snapshot replaces it
	// (bounding the directory and the recovery time);
	// DefaultSnapshotBytes when zero.
	SnapshotBytes int64
}

// DefaultConnectTimeout is the CONNECT deadline used when
// Config.ConnectTimeout is zero.
const DefaultConnectTimeout = 10 * time.Second

// Broker is an embedded MQTT5 broker with the state store inside.
type Broker struct {
	cfg      Config
	log      *slog.Logger
	tlsCfg   *tls.Config
	srv      *mqtt.Server
	hook     *storeHook
	store    *store.Store
	listener net.Listener // bound listener (set by New or Start)
	aclData  []byte       // the ACL file as loaded by New
	pwData   []byte       // the password file as loaded by New

	mu      sync.Mutex
	started bool
	closed  bool
	addr    string
	ln      *listener
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the expiry loop, the ACL file watch and the compaction loop
}

// Stats is a snapshot of the store for inspection and tests.
type Stats struct {
	Keys           int    // stored keys (expired ones not yet reaped included)
	Bytes          int64  // their size as the byte quota counts it (Config.MaxBytes)
	Registrations  int    // KEYNOTIFY registrations
	NotifyDropped  uint64 // messages to clients that could not be delivered (connection gone, write failed)
	QueueOverflows uint64 // clients disconnected because their output queue overflowed
	NotifyQueued   uint64 // KEYNOTIFY notifications queued for delivery to clients
	Connections    int64  // MQTT clients connected now
}

// New validates cfg and builds the broker. It does not listen; see Start.
func New(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Quota == 0 {
		cfg.Quota = DefaultQuota
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ClientQueueBytes <= 0 {
		cfg.ClientQueueBytes = DefaultClientQueueBytes
	}
	if cfg.ClientQueueLen <= 0 {
		cfg.ClientQueueLen = DefaultClientQueueLen
	}
	if cfg.OfflineQueueBytes <= 0 {
		cfg.OfflineQueueBytes = DefaultOfflineQueueBytes
	}
	switch {
	case cfg.ConnectTimeout == 0:
		cfg.ConnectTimeout = DefaultConnectTimeout
	case cfg.ConnectTimeout < 0:
		cfg.ConnectTimeout = 0
	}
	if cfg.FsyncInterval == 0 {
		cfg.FsyncInterval = store.DefaultFsyncInterval
	}
	if cfg.Fsync > store.FsyncNever || cfg.FsyncInterval < 0 {
		return nil, fmt.Errorf("%w: fsync policy %v every %v", ErrConfig, cfg.Fsync, cfg.FsyncInterval)
	}
	if cfg.SnapshotBytes == 0 {
		cfg.SnapshotBytes = store.DefaultSnapshotBytes
	}
	if cfg.SnapshotBytes < 0 {
		return nil, fmt.Errorf("%w: snapshot size %d", ErrConfig, cfg.SnapshotBytes)
	}
	b := &Broker{cfg: cfg, log: cfg.Logger}
	local := false
	if cfg.Listener != nil {
		local = isLocalAddr(cfg.Listener.Addr())
	} else {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("%w: listen address %q: %w", ErrConfig, cfg.Listen, err)
		}
		if _, err := net.LookupPort("tcp", port); err != nil {
			return nil, fmt.Errorf("%w: listen address %q: bad port: %w", ErrConfig, cfg.Listen, err)
		}
		local = isLoopback(host)
	}
	var creds *credentials
	if cfg.PasswordFile != "" {
		c, data, err := readPasswordFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		creds, b.pwData = c, data
	}
	if len(cfg.Users) > 0 {
		c, err := creds.with(cfg.Users)
		if err != nil {
			return nil, fmt.Errorf("%w: Users: %w", ErrConfig, err)
		}
		creds = c
	}
	var policy *aclPolicy
	if cfg.ACLFile != "" {
		p, data, err := readACLFile(cfg.ACLFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		policy, b.aclData = p, data
	}
	if !local && creds == nil && !cfg.Insecure {
		return nil, fmt.Errorf("%w: listen address %s is not loopback: require credentials (Config.PasswordFile, ssrun broker --passwords) or allow open access explicitly (Config.Insecure, --insecure)", ErrConfig, b.listenAddr())
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, fmt.Errorf("%w: TLS needs both a certificate file and a key file", ErrConfig)
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS key pair %s, %s: %w", ErrConfig, cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
		b.tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = MaxPacketSize
	caps.Compatibilities.NoInheritedPropertiesOnAck = true // PUBACKs must not echo request user properties
	caps.MaximumSessionExpiryInterval = maxSessionExpirySeconds(cfg.MaxSessionExpiry)
	b.srv = mqtt.New(&mqtt.Options{
		Capabilities: caps,
		Logger:       mochiLogger(cfg.Logger),
	})
	b.store = store.New(cfg.Now, store.Quota{Keys: cfg.Quota, Bytes: cfg.MaxBytes})
	if cfg.DataDir != "" {
		if err := b.openData(); err != nil {
			return nil, err
		}
	}
	b.hook = &storeHook{
		srv:        b.srv,
		store:      b.store,
		log:        cfg.Logger,
		queueBytes: cfg.ClientQueueBytes,
		queueLen:   cfg.ClientQueueLen,
		keepAlive:  maxKeepAliveSeconds(cfg.MaxKeepAlive),
		offline:    newOfflineOutboxes(cfg.OfflineQueueBytes, cfg.Logger),

		maxSessionExpiry: caps.MaximumSessionExpiryInterval,
		boxes:            make(map[string]*outbox),
		conns:            make(map[string]*mqtt.Client),
		watchers:         make(map[*mqtt.Client]*watcher),
		since:            make(map[*mqtt.Client]time.Time),
	}
	if creds != nil || policy != nil || cfg.Authorize {
		b.hook.authz = newAuthz(b.srv, cfg.Logger, creds, policy)
	}
	if err := b.srv.AddHook(b.hook, nil); err != nil {
		_ = b.store.Close()
		return nil, fmt.Errorf("broker: add store hook: %w", err)
	}
	return b, nil
}

// authorization describes the access policy for the log.
func (b *Broker) authorization() string {
	switch {
	case b.cfg.ACLFile != "":
		return "ACL file " + b.cfg.ACLFile + " (reloaded when it changes)"
	case b.hook.authz != nil:
		return "default policy"
	}
	return "off"
}

func (b *Broker) listenAddr() string {
	if b.cfg.Listener != nil {
		return b.cfg.Listener.Addr().String()
	}
	return b.cfg.Listen
}

// watchFiles starts following the ACL file and the password file, when
// set, to reload them (acl_reload.go).
func (b *Broker) watchFiles() ([]*fileWatch, error) {
	var watches []*fileWatch
	add := func(fw *fileWatch, err error) error {
		if err != nil {
			for _, w := range watches {
				_ = w.w.Close()
			}
			return fmt.Errorf("broker: %w", err)
		}
		watches = append(watches, fw)
		return nil
	}
	if b.cfg.ACLFile != "" {
		if err := add(b.hook.authz.watchACL(b.cfg.ACLFile, b.aclData)); err != nil {
			return nil, err
		}
	}
	if b.cfg.PasswordFile != "" {
		if err := add(b.hook.authz.watchPasswords(b.cfg.PasswordFile, b.pwData, b.cfg.Users)); err != nil {
			return nil, err
		}
	}
	return watches, nil
}

// Start listens and serves in the background until Close.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return errors.New("broker: start: already closed")
	case b.started:
		return errors.New("broker: start: already started")
	}
	watches, err := b.watchFiles()
	if err != nil {
		return err
	}
	closeWatches := func() {
		for _, fw := range watches {
			_ = fw.w.Close()
		}
	}
	ln := b.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", b.cfg.Listen); err != nil {
			closeWatches()
			return fmt.Errorf("broker: listen on %s: %w", b.cfg.Listen, err)
		}
	}
	b.ln = newListener(ln, b.tlsCfg, b.cfg.ConnectTimeout, b.log)
	b.hook.ended = b.ln.ended
	if err := b.srv.AddListener(b.ln); err != nil {
		_ = ln.Close()
		closeWatches()
		return fmt.Errorf("broker: add listener: %w", err)
	}
	if err := b.srv.Serve(); err != nil {
		_ = ln.Close()
		b.ln.notServed()
		closeWatches()
		return fmt.Errorf("broker: serve: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.store.Run(ctx)
	}()
	for _, fw := range watches {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			fw.run(ctx)
		}()
	}
	if b.store.Persisted() {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.store.CompactLoop(ctx)
		}()
	}
	b.addr = ln.Addr().String()
	b.started = true
	b.log.Info("state store broker listening", "addr", b.addr, "tls", b.tlsCfg != nil, "auth", b.cfg.PasswordFile != "",
		"authorization", b.authorization())
	if b.hook.authz != nil && b.cfg.PasswordFile == "" {
		b.log.Warn("authorization without a password file: user names are taken as clients claim them, which is not secure")
	}
	b.logPersistence()
	return nil
}

// Addr is the host:port the broker is bound to ("" before Start).
func (b *Broker) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// Close disconnects every client, stops the broker and waits for all its
// goroutines. It is safe to call more than once.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	started := b.started
	b.mu.Unlock()

	if !started {
		if b.cfg.Listener != nil {
			_ = b.cfg.Listener.Close()
		}
		_ = b.srv.Close()
		b.hook.closeBoxes()
		return b.store.Close()
	}
	err := b.ln.stopAccepting()
	// End every client before srv.Close: mochi's Clients.GetByListener,
	// which srv.Close uses, takes its read lock twice, and a client removing
	// itself between the two (Clients.Delete waits for the write lock, which
	// blocks the second read lock) deadlocks it. So DISCONNECT the clients
	// here (Clients.GetAll locks once) and wait for every connection
	// goroutine; by then nobody can call Delete.
	disconnected := make(chan struct{})
	go func() {
		defer close(disconnected)
		for _, cl := range b.srv.Clients.GetAll() {
			if !cl.Net.Inline && !cl.Closed() {
				// Blocks while a client's writes are stuck: bounded below.
				_ = b.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
			}
		}
	}()
	if !b.ln.wait(closeGrace) {
		// Connections that never completed CONNECT (not mochi clients yet),
		// or whose peer stopped reading (a blocked write), would keep them
		// waiting: closing the sockets ends them.
		b.ln.closeAll()
	}
	b.ln.wait(0)
	<-disconnected    // its writes failed once the sockets closed
	_ = b.srv.Close() // no connection goroutine is left to race it
	b.cancel()
	b.wg.Wait()
	b.hook.closeBoxes()
	if derr := b.store.Close(); derr != nil {
		return fmt.Errorf("broker: close data directory: %w", derr)
	}
	if err != nil {
		return fmt.Errorf("broker: close listener: %w", err)
	}
	return nil
}

// Keys returns the number of stored keys.
func (b *Broker) Keys() int { return b.Stats().Keys }

// Stats returns a snapshot of the store.
func (b *Broker) Stats() Stats {
	keys, bytes, regs := b.store.Stats()
	return Stats{Keys: keys, Bytes: bytes, Registrations: regs,
		NotifyDropped: b.hook.outStats.dropped.Load(), QueueOverflows: b.hook.outStats.overflows.Load(),
		NotifyQueued: b.hook.outStats.notified.Load(),
		Connections:  atomic.LoadInt64(&b.srv.Info.ClientsConnected)}
}
