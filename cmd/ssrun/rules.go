package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/runtime/plugin"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// runtimes builds the Lua, WebAssembly and plugin runtimes.
func (a *app) runtimes(cfg *fileConfig) ([]abi.Runtime, error) {
	return a.runtimesLua(cfg, lua.Config{})
}

// runtimesLua is runtimes with the Lua runtime's settings given.
func (a *app) runtimesLua(cfg *fileConfig, lc lua.Config) ([]abi.Runtime, error) {
	lr := lua.New(lc)
	wr, err := wasm.New(wasm.Config{Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("wasm runtime: %w", err)
	}
	sums := map[string]string{}
	if cfg != nil {
		for _, p := range cfg.Plugins {
			if p.SHA256 != "" {
				abs, err := filepath.Abs(p.Path)
				if err != nil {
					return nil, err
				}
				sums[abs] = p.SHA256
			}
		}
	}
	pr, err := plugin.New(plugin.Config{Logger: a.log, Checksums: sums, ExecDir: a.pluginDir})
	if err != nil {
		return nil, fmt.Errorf("plugin runtime: %w", err)
	}
	return []abi.Runtime{lr, wr, pr}, nil
}

// closeRuntimes closes the runtimes, giving up when ctx ends: a runtime
// that does not return (stuck with a rule it cannot interrupt) is left to
// the process's exit.
func (a *app) closeRuntimes(ctx context.Context, rts []abi.Runtime) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, rt := range rts {
			if err := rt.Close(ctx); err != nil {
				a.log.Warn("closing runtime", "runtime", rt.Kind(), "err", err)
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		a.log.Warn("runtimes did not close in time; leaving them to the exit", "err", ctx.Err())
	}
}

// closeRuntimesNow closes the runtimes within the default shutdown timeout.
func (a *app) closeRuntimesNow(rts []abi.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	a.closeRuntimes(ctx, rts)
}

// rulesConfig loads the config named by --config, or DIR/ssrun.yaml when it
// exists; nil when there is none.
func rulesConfig(dir, flag string) (*fileConfig, error) {
	p := flag
	if p == "" {
		p = filepath.Join(dir, "ssrun.yaml")
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	return loadConfig(p)
}

// serveRules runs a host for the rules in dir (checked by the caller with
// checkRulesDir before it connects) on client until ctx ends:
// loads every rule, hot-reloads the folder, and on exit stops every rule
// within shutdown (a rule stuck in a call is abandoned, and the error, exit
// status 1, names it). adm, when not nil, gets the host's metrics and readiness.
func (a *app) serveRules(ctx context.Context, client *protocol.Client, dir string, cfg *fileConfig, shutdown time.Duration, adm *adminRun, ready func(h *host.Host)) (err error) {
	rec, recorded, err := a.openRecorder()
	if err != nil {
		return err
	}
	defer func() { // after the host has stopped: the trace is complete
		if rerr := recorded(); rerr != nil {
			err = errors.Join(err, &exitError{code: 1, msg: "ssrun: " + rerr.Error()})
		}
	}()
	var lc lua.Config
	if rec != nil { // math.random drawn as the replay will draw it
		lc.Rand = rec.Rand
	}
	rts, err := a.runtimesLua(cfg, lc)
	if err != nil {
		return err
	}
	opts := host.Config{Store: client, Runtimes: rts, Logger: a.log, Observer: adm.handleObserver(), Tracer: adm.handleTracer()}
	if rec != nil {
		opts.Recorder = rec
	}
	if a.dryRun {
		opts.DryRun = printStagedWrites(a.stdout, a.logFormat)
		fmt.Fprintln(a.stdout, "dry run: the rules' writes, locks and timers are printed here, never sent to the store")
	}
	if cfg != nil {
		opts.Defaults = cfg.Defaults.toHost()
		opts.Rules = cfg.hostRules()
	}
	if opts.Group, err = a.group.config(a.dryRun); err != nil {
		a.closeRuntimesNow(rts)
		return err
	}
	h, err := host.New(opts)
	if err != nil {
		a.closeRuntimesNow(rts)
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdown)
		defer cancel()
		cerr := h.Close(sctx)
		a.closeRuntimes(sctx, rts)
		if sctx.Err() != nil {
			cerr = fmt.Errorf("rules did not stop within %v: %w", shutdown, cerr)
		}
		if cerr != nil {
			err = errors.Join(err, &exitError{code: 1, msg: "ssrun: stopping rules: " + cerr.Error()})
		}
	}()
	var plugins []string
	if cfg != nil {
		for _, p := range cfg.Plugins {
			plugins = append(plugins, p.Path)
		}
	}
	loaded := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- h.WatchDir(ctx, dir, loaded, plugins...) }()
	select {
	case <-loaded:
		defer a.followConfig(ctx, h, dir, cfg)()
		adm.rulesLoaded(h)
		if ready != nil {
			ready(h)
		}
	case err := <-done:
		return err
	}
	return <-done
}

func checkRulesDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("rules folder: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("rules folder %s: not a directory", dir)
	}
	return nil
}

// tryKey picks a key a loaded rule watches, for the hint printed at start.
func tryKey(h *host.Host) string {
	var keys []string
	for _, s := range h.Status() {
		keys = append(keys, s.Watches...)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "greeting"
	}
	return keys[0]
}

// shutdownFlag registers --shutdown-timeout on cmd.
func shutdownFlag(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "shutdown-timeout", DefaultShutdownTimeout,
		"how long stopping may take after a signal (rules stuck in a call are abandoned); a second signal exits at once")
}

// prepareRules is what dev and run do first: check --shutdown-timeout and
// hand it to main's backstop, check the rules folder, read ssrun.yaml.
func prepareRules(dir, config string, shutdown time.Duration) (*fileConfig, error) {
	if err := setShutdown(shutdown); err != nil {
		return nil, err
	}
	if err := checkRulesDir(dir); err != nil {
		return nil, err
	}
	return rulesConfig(dir, config)
}

// setShutdown checks the --shutdown-timeout value and hands it to main's
// backstop.
func setShutdown(d time.Duration) error {
	if d <= 0 {
		return usageError("--shutdown-timeout %v: want a positive duration", d)
	}
	shutdownBudget.Store(int64(d))
	return nil
}

func (a *app) devCmd() *cobra.Command {
	var f brokerFlags
	var af adminFlags
	cmd := a.rulesCmd("dev DIR|oci://REF", "Run the rules in DIR on an embedded broker and state store, reloading them as they change",
		"ssrun.yaml with rule limits and permissions (default DIR/ssrun.yaml if present)",
		func(ctx context.Context, _ *cobra.Command, dir string, cfg *fileConfig, shutdown time.Duration) error {
			adm, err := a.startAdmin(ctx, &af, adminParts{broker: true, rules: true})
			if err != nil {
				return err
			}
			defer adm.close()
			var users map[string][]byte
			var creds func() (protocol.Credentials, error)
			if f.passwords != "" {
				if users, creds, err = devCredentials(); err != nil {
					return err
				}
			}
			b, err := a.startBroker(&f, users)
			if err != nil {
				return err
			}
			defer b.Close()
			adm.brokerStarted(b)
			// The client outlives the signal: rules release their watches
			// and locks through it on the way out; Close ends it.
			client, err := protocol.New(context.WithoutCancel(ctx), protocol.Config{
				Servers:     []string{"mqtt://" + b.Addr()},
				ClientID:    devUser + "-" + randomSuffix(),
				Credentials: creds,
				Logger:      a.log,
				Observer:    adm.requestObserver(),
			})
			if err != nil {
				return err
			}
			defer client.Close()
			if err := a.awaitStart(ctx, client, "ssrun dev's rules host", true); err != nil {
				return fmt.Errorf("connecting to the embedded broker: %w", err)
			}
			adm.withClient(client)
			ctx, stop := watchBroker(ctx, b)
			err = a.serveRules(ctx, client, dir, cfg, shutdown, adm, func(h *host.Host) {
				fmt.Fprintf(a.stdout, "ssrun dev: state store on %s, %d rule(s) from %s (edit them; they reload)\n", b.Addr(), len(h.Status()), dir)
				fmt.Fprintf(a.stdout, "try: ssrun kv --broker %s set %s 30\n", b.Addr(), tryKey(h))
			})
			if ferr := stop(); ferr != nil {
				return ferr
			}
			return err
		})
	f.register(cmd)
	af.register(cmd, true)
	return cmd
}

// rulesCmd builds dev and run: the DIR argument, --config and
// --shutdown-timeout, and their first steps (prepareRules); serve does the
// rest.
func (a *app) rulesCmd(use, short, configHelp string, serve func(ctx context.Context, cmd *cobra.Command, dir string, cfg *fileConfig, shutdown time.Duration) error) *cobra.Command {
	var config string
	var shutdown time.Duration
	var of ociFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if err := setShutdown(shutdown); err != nil {
				return err
			}
			dir, closeRules, err := a.openRules(cmd.Context(), &of, args[0])
			if err != nil {
				return err
			}
			defer func() {
				if cerr := closeRules(); cerr != nil {
					err = errors.Join(err, fmt.Errorf("closing the rules from %s: %w", args[0], cerr))
				}
			}()
			cfg, err := prepareRules(dir, config, shutdown)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cmd, dir, cfg, shutdown)
		},
	}
	of.register(cmd, true)
	cmd.Flags().StringVar(&config, "config", "", configHelp)
	shutdownFlag(cmd, &shutdown)
	pluginDirFlag(cmd, &a.pluginDir)
	dryRunFlag(cmd, &a.dryRun)
	recordFlag(cmd, &a.recordPath)
	a.group.register(cmd)
	return cmd
}

// devUser is the user `ssrun dev --passwords` connects its rules host as.
const devUser = "ssrun-dev"

// devCredentials makes devUser's password for this run: the broker's extra
// user and the rules host's credentials.
func devCredentials() (map[string][]byte, func() (protocol.Credentials, error), error) {
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	pw := []byte(hex.EncodeToString(secret[:]))
	hash, err := bcrypt.GenerateFromPassword(pw, bcrypt.MinCost) // 128 random bits need no cost
	if err != nil {
		return nil, nil, fmt.Errorf("dev user: %w", err)
	}
	return map[string][]byte{devUser: hash}, func() (protocol.Credentials, error) {
		return protocol.Credentials{Username: devUser, Password: pw}, nil
	}, nil
}

func (a *app) runCmd() *cobra.Command {
	var conn connFlags
	var af adminFlags
	cmd := a.rulesCmd("run DIR|oci://REF", "Run the rules in DIR against an external broker (AIO settings from flags, AIO_* variables or ssrun.yaml)",
		"ssrun.yaml (default DIR/ssrun.yaml if present)",
		func(ctx context.Context, cmd *cobra.Command, dir string, cfg *fileConfig, shutdown time.Duration) error {
			var s connSettings
			if cfg != nil {
				s = cfg.Broker
			}
			if err := s.applyEnv(os.LookupEnv); err != nil {
				return usageError("%v", err)
			}
			if err := conn.apply(cmd.Flags(), &s); err != nil {
				return usageError("%v", err)
			}
			ccfg, err := s.clientConfig()
			if err != nil {
				return usageError("%v", err)
			}
			if ccfg.ClientID == "" {
				ccfg.ClientID = defaultClientID(s.Username, "run")
			}
			ccfg.Logger = a.log
			adm, err := a.startAdmin(ctx, &af, adminParts{rules: true})
			if err != nil {
				return err
			}
			defer adm.close()
			ccfg.Observer = adm.requestObserver()
			client, err := protocol.New(context.WithoutCancel(ctx), ccfg)
			if err != nil {
				return err
			}
			defer client.Close()
			adm.withClient(client)
			fmt.Fprintf(a.stdout, "ssrun run: connecting to %s as %s\n", ccfg.Servers[0], client.ClientID())
			a.connectionNotes(ctx, s, ccfg.Servers[0])
			// Says why a refused first login is refused; ends with the command.
			sctx, stopStart := context.WithCancel(ctx)
			started := make(chan struct{})
			go func() { defer close(started); _ = a.awaitStart(sctx, client, "ssrun run", false) }()
			defer func() { stopStart(); <-started }()
			if s.SATFile != "" {
				stop, err := a.watchToken(ctx, client, s.SATFile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return a.serveRules(ctx, client, dir, cfg, shutdown, adm, func(h *host.Host) {
				fmt.Fprintf(a.stdout, "ssrun run: %d rule(s) from %s\n", len(h.Status()), dir)
			})
		})
	conn.register(cmd.Flags(), "")
	af.register(cmd, true)
	return cmd
}
