package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/broker"
)

// brokerFlags are the embedded broker's settings, shared by `broker` and `dev`.
type brokerFlags struct {
	listen, passwords, acl, tlsCert, tlsKey string
	quota                                   int
	maxBytes                                sizeFlag
	insecure, authorize                     bool

	data, fsync   string // persistence
	fsyncInterval time.Duration
	snapshotBytes sizeFlag

	clientQueueBytes  sizeFlag // bounds per session and connection
	clientQueueLen    int
	offlineQueueBytes sizeFlag
	maxSessionExpiry  time.Duration
	connectTimeout    time.Duration
	maxKeepAlive      time.Duration
}

func (f *brokerFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:1883", "address to listen on, HOST:PORT (port 0 picks a free one)")
	fs.IntVar(&f.quota, "quota", 0, "maximum number of keys (0: the default, 1000000; negative: unlimited)")
	fs.Var(&f.maxBytes, "max-bytes", "maximum size of the stored data, keys + values + 128 B per key, e.g. 512MiB (default 256MiB; -1: unlimited)")
	fs.StringVar(&f.passwords, "passwords", "", "a `FILE` of user:bcrypt-hash lines, one per user (make them with `ssrun passwd`); required off loopback unless --insecure")
	fs.BoolVar(&f.insecure, "insecure", false, "allow unauthenticated clients on a non-loopback address")
	fs.StringVar(&f.acl, "acl", "", "ACL file (YAML, AIO BrokerAuthorization shape): users' client ids, topics and keys; reloaded when it changes")
	fs.BoolVar(&f.authorize, "authorize", false, "apply the default authorization policy without --passwords (user names as claimed: for development)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate PEM (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS key PEM (with --tls-cert)")
	fs.StringVar(&f.data, "data", "", "keep the keys in this directory across restarts and crashes (default: in memory only)")
	fs.StringVar(&f.fsync, "fsync", "always", "with --data, when changes reach the disk: always (before each reply), interval (every --fsync-interval), never (left to the OS)")
	fs.DurationVar(&f.fsyncInterval, "fsync-interval", broker.DefaultFsyncInterval, "period of --fsync interval")
	fs.Var(&f.snapshotBytes, "snapshot-bytes", "with --data, journal size at which a snapshot replaces it, e.g. 16MiB (default 64MiB)")
	fs.Var(&f.clientQueueBytes, "client-queue-bytes", "responses and notifications one session may have waiting to be written or acknowledged before its client is disconnected (default 16MiB)")
	fs.IntVar(&f.clientQueueLen, "client-queue-len", 0, "the same bound in messages (0: the default, 4096)")
	fs.Var(&f.offlineQueueBytes, "offline-queue-bytes", "what the sessions without a connection may hold together before the oldest are emptied (default 64MiB)")
	fs.DurationVar(&f.maxSessionExpiry, "max-session-expiry", broker.DefaultMaxSessionExpiry, "the longest a session outlives its connection (a client asking for more is told this one); whole seconds")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", broker.DefaultConnectTimeout, "how long a new connection may take to send CONNECT")
	fs.DurationVar(&f.maxKeepAlive, "max-keep-alive", broker.DefaultMaxKeepAlive, "the longest keepalive an MQTT 5 client gets (one asking for none or more is told this one); whole seconds")
}

// persistence returns the store's persistence settings from the flags.
func (f *brokerFlags) persistence() (broker.FsyncPolicy, error) {
	policy, err := broker.ParseFsyncPolicy(f.fsync)
	if err != nil {
		return 0, usageError("--fsync: %v", err)
	}
	if f.fsyncInterval <= 0 {
		return 0, usageError("--fsync-interval %v: must be positive", f.fsyncInterval)
	}
	if f.snapshotBytes < 0 {
		return 0, usageError("--snapshot-bytes: must be a positive size")
	}
	if f.clientQueueBytes < 0 || f.clientQueueLen < 0 || f.offlineQueueBytes < 0 || f.connectTimeout <= 0 {
		return 0, usageError("--client-queue-bytes, --client-queue-len, --offline-queue-bytes and --connect-timeout must be positive")
	}
	if f.maxSessionExpiry < time.Second || f.maxSessionExpiry > math.MaxUint32*time.Second {
		return 0, usageError("--max-session-expiry %v: must be from 1s to 4294967295s", f.maxSessionExpiry)
	}
	if f.maxKeepAlive < time.Second || f.maxKeepAlive > 65535*time.Second {
		return 0, usageError("--max-keep-alive %v: must be from 1s to 65535s", f.maxKeepAlive)
	}
	return policy, nil
}

func (a *app) startBroker(f *brokerFlags, users map[string][]byte) (*broker.Broker, error) {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, usageError("--tls-cert and --tls-key go together")
	}
	fsync, err := f.persistence()
	if err != nil {
		return nil, err
	}
	b, err := broker.New(broker.Config{
		Listen:        f.listen,
		Quota:         f.quota,
		MaxBytes:      int64(f.maxBytes),
		PasswordFile:  f.passwords,
		ACLFile:       f.acl,
		Authorize:     f.authorize,
		Insecure:      f.insecure,
		TLSCertFile:   f.tlsCert,
		TLSKeyFile:    f.tlsKey,
		Logger:        a.log,
		DataDir:       f.data,
		Fsync:         fsync,
		FsyncInterval: f.fsyncInterval,
		SnapshotBytes: int64(f.snapshotBytes),
		Users:         users,

		ClientQueueBytes:  int(f.clientQueueBytes),
		ClientQueueLen:    f.clientQueueLen,
		OfflineQueueBytes: int(f.offlineQueueBytes),
		MaxSessionExpiry:  f.maxSessionExpiry,
		ConnectTimeout:    f.connectTimeout,
		MaxKeepAlive:      f.maxKeepAlive,
	})
	if err != nil {
		return nil, err
	}
	if err := b.Start(); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w (another broker running? pick a free address with --listen, e.g. --listen 127.0.0.1:0)", err)
		}
		return nil, err
	}
	return b, nil
}

func (a *app) brokerCmd() *cobra.Command {
	var f brokerFlags
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded MQTT5 broker with the state store inside it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := a.startAdmin(cmd.Context(), &af, adminParts{broker: true})
			if err != nil {
				return err
			}
			defer adm.close()
			b, err := a.startBroker(&f, nil)
			if err != nil {
				return err
			}
			adm.brokerStarted(b)
			fmt.Fprintf(a.stdout, "ssrun broker: state store listening on %s\n", b.Addr())
			if f.data == "" {
				fmt.Fprintln(a.stdout, "ssrun broker: keys in memory only, lost when it stops (--data DIR keeps them)")
			} else {
				fmt.Fprintf(a.stdout, "ssrun broker: keys kept in %s (fsync %s)\n", f.data, f.fsync)
			}
			fmt.Fprintf(a.stdout, "try: ssrun kv --broker %s set greeting hello\n", b.Addr())
			ctx, stop := watchBroker(cmd.Context(), b)
			<-ctx.Done()
			if err := stop(); err != nil {
				_ = b.Close()
				return err
			}
			return b.Close()
		},
	}
	f.register(cmd)
	af.register(cmd, false)
	return cmd
}

// watchBroker returns a context that also ends if b's data directory fails
// (a failed write or fsync: changes are refused from then on), and a
// function that stops watching and returns that failure, if any.
func watchBroker(ctx context.Context, b *broker.Broker) (context.Context, func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var fatal error
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case fatal = <-b.Fatal():
			cancel()
		}
	}()
	return ctx, func() error {
		cancel()
		<-done
		return fatal
	}
}

func (a *app) passwdCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passwd USER",
		Short: "Read a password from stdin and print a `user:hash` line for --passwords",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := broker.CheckUserName(args[0]); err != nil {
				return usageError("%v", err)
			}
			line, err := bufio.NewReader(a.stdin).ReadString('\n')
			pw := strings.TrimRight(line, "\r\n")
			if pw == "" {
				if err != nil {
					return usageError("no password on stdin: %v", err)
				}
				return usageError("empty password")
			}
			hash, err := broker.HashPassword([]byte(pw))
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s:%s\n", args[0], hash)
			return nil
		},
	}
}
