package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/runtime/plugin"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// runtimes builds the Lua, WebAssembly and plugin runtimes.
func (a *app) runtimes(cfg *fileConfig) ([]abi.Runtime, error) {
	lr := lua.New(lua.Options{})
	wr, err := wasm.New(wasm.Options{Logger: a.log})
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
	pr, err := plugin.New(plugin.Options{Logger: a.log, Checksums: sums})
	if err != nil {
		return nil, fmt.Errorf("plugin runtime: %w", err)
	}
	return []abi.Runtime{lr, wr, pr}, nil
}

func closeRuntimes(rts []abi.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, rt := range rts {
		_ = rt.Close(ctx)
	}
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
// loads every rule, hot-reloads the folder, and on exit stops every rule.
func (a *app) serveRules(ctx context.Context, client *protocol.Client, dir string, cfg *fileConfig, ready func(h *host.Host)) error {
	rts, err := a.runtimes(cfg)
	if err != nil {
		return err
	}
	defer closeRuntimes(rts)
	opts := host.Options{Client: client, Runtimes: rts, Logger: a.log}
	if cfg != nil {
		opts.Defaults = cfg.Defaults.toHost()
		opts.Rules = cfg.hostRules()
	}
	h, err := host.New(opts)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := h.Close(cctx); err != nil {
			a.log.Warn("stopping rules", "err", err)
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

func (a *app) devCmd() *cobra.Command {
	var f brokerFlags
	var config string
	cmd := &cobra.Command{
		Use:   "dev DIR",
		Short: "Run the rules in DIR on an embedded broker and state store, reloading them as they change",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			dir := args[0]
			if err := checkRulesDir(dir); err != nil {
				return err
			}
			cfg, err := rulesConfig(dir, config)
			if err != nil {
				return err
			}
			b, err := a.startBroker(&f)
			if err != nil {
				return err
			}
			defer b.Close()
			// The client outlives the signal: rules release their watches
			// and locks through it on the way out; Close ends it.
			client, err := protocol.New(context.WithoutCancel(ctx), protocol.Config{
				Servers:  []string{"mqtt://" + b.Addr()},
				ClientID: "ssrun-dev-" + randomSuffix(),
				Logger:   a.log,
			})
			if err != nil {
				return err
			}
			defer client.Close()
			if err := client.AwaitConnection(ctx); err != nil {
				return fmt.Errorf("connecting to the embedded broker: %w", err)
			}
			ctx, stop := watchBroker(ctx, b)
			err = a.serveRules(ctx, client, dir, cfg, func(h *host.Host) {
				fmt.Fprintf(a.stdout, "ssrun dev: state store on %s, %d rule(s) from %s (edit them; they reload)\n", b.Addr(), len(h.Status()), dir)
				fmt.Fprintf(a.stdout, "try: ssrun kv --broker %s set %s 30\n", b.Addr(), tryKey(h))
			})
			if ferr := stop(); ferr != nil {
				return ferr
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&config, "config", "", "ssrun.yaml with rule limits and permissions (default DIR/ssrun.yaml if present)")
	return cmd
}

func (a *app) runCmd() *cobra.Command {
	var conn connFlags
	var config string
	cmd := &cobra.Command{
		Use:   "run DIR",
		Short: "Run the rules in DIR against an external broker (AIO settings from flags, AIO_* variables or ssrun.yaml)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			dir := args[0]
			if err := checkRulesDir(dir); err != nil {
				return err
			}
			cfg, err := rulesConfig(dir, config)
			if err != nil {
				return err
			}
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
				ccfg.ClientID = "ssrun-" + randomSuffix()
			}
			ccfg.Logger = a.log
			client, err := protocol.New(context.WithoutCancel(ctx), ccfg)
			if err != nil {
				return err
			}
			defer client.Close()
			fmt.Fprintf(a.stdout, "ssrun run: connecting to %s as %s\n", ccfg.Servers[0], client.ClientID())
			if s.SATFile != "" {
				stop, err := a.watchToken(ctx, client, s.SATFile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return a.serveRules(ctx, client, dir, cfg, func(h *host.Host) {
				fmt.Fprintf(a.stdout, "ssrun run: %d rule(s) from %s\n", len(h.Status()), dir)
			})
		},
	}
	conn.register(cmd.Flags(), "")
	cmd.Flags().StringVar(&config, "config", "", "ssrun.yaml (default DIR/ssrun.yaml if present)")
	return cmd
}

func (a *app) checkCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE...",
		Short: "Compile and validate rule files without running them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rts, err := a.runtimes(nil)
			if err != nil {
				return err
			}
			defer closeRuntimes(rts)
			byKind := map[string]abi.Runtime{}
			for _, rt := range rts {
				byKind[rt.Kind()] = rt
			}
			failed := 0
			for _, p := range args {
				if err := checkFile(cmd.Context(), byKind, p); err != nil {
					fmt.Fprintln(a.stderr, err)
					failed++
					continue
				}
				fmt.Fprintf(a.stdout, "ok %s\n", p)
			}
			if failed > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d of %d file(s) failed", failed, len(args))}
			}
			return nil
		},
	}
}

func checkFile(ctx context.Context, byKind map[string]abi.Runtime, p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	kind, _ := host.RuleKind(p, info)
	rt, ok := byKind[kind]
	if !ok {
		return fmt.Errorf("%s: not a rule file (want .lua, .wasm or an executable plugin)", p)
	}
	src, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	_, err = rt.Compile(ctx, p, src)
	return err
}
