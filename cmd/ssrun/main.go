// Command ssrun scripts the Azure IoT Operations state store: it runs an
// embedded MQTT5 broker with a faithful state store (`ssrun broker`), a
// client for people (`ssrun kv`), and a host that runs Lua, WebAssembly and
// plugin rules reacting to key changes (`ssrun dev`, `ssrun run`,
// `ssrun check`).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	stop := onSignals(cancel)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// DefaultShutdownTimeout bounds how long dev and run take to stop after a
// signal (--shutdown-timeout): below Kubernetes' default grace period of
// 30 s, after which the kubelet kills the process.
const DefaultShutdownTimeout = 20 * time.Second

// shutdownBudget is the running command's stop bound, in nanoseconds: dev
// and run set it from --shutdown-timeout.
var shutdownBudget atomic.Int64

func init() { shutdownBudget.Store(int64(DefaultShutdownTimeout)) }

// backstopMargin is how long past its shutdown timeout a command may take
// to return before main exits without it.
const backstopMargin = 5 * time.Second

// onSignals cancels the command's context on the first SIGINT or SIGTERM,
// so that it stops cleanly, and exits at once on the second. If the command
// has not returned within its shutdown timeout plus backstopMargin after
// the first, it exits too. stop ends the watch.
func onSignals(cancel context.CancelFunc) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	finished := make(chan struct{})
	w := signalWatch{sigs: sigs, cancel: cancel, stderr: os.Stderr, exit: os.Exit,
		bound: func() time.Duration { return time.Duration(shutdownBudget.Load()) + backstopMargin }}
	go func() { defer close(finished); w.run(done) }()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-finished
	}
}

// signalWatch is onSignals' logic, apart from the process so tests can
// drive it.
type signalWatch struct {
	sigs   <-chan os.Signal
	cancel context.CancelFunc
	bound  func() time.Duration // from the first signal to the backstop exit
	exit   func(code int)
	stderr io.Writer
}

// run waits for the first signal (or done), cancels, then exits on a second
// signal or at the bound unless done comes first.
func (w signalWatch) run(done <-chan struct{}) {
	var sig os.Signal
	select {
	case sig = <-w.sigs:
	case <-done:
		return
	}
	fmt.Fprintf(w.stderr, "ssrun: %v: stopping (send the signal again to exit at once)\n", sig)
	w.cancel()
	bound := w.bound()
	backstop := time.NewTimer(bound)
	defer backstop.Stop()
	select {
	case sig = <-w.sigs:
		fmt.Fprintf(w.stderr, "ssrun: second signal (%v): exiting without stopping the rules\n", sig)
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		w.exit(code)
	case <-backstop.C:
		fmt.Fprintf(w.stderr, "ssrun: still running %v after the signal: exiting\n", bound)
		w.exit(1)
	case <-done:
	}
}

// exitError carries a specific exit status (e.g. 1 for "not found").
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// run executes the command line and returns the exit status. It is the whole
// program except os.Exit, so tests call it directly.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &app{stdin: stdin, stdout: stdout, stderr: stderr, lookupEnv: os.LookupEnv}
	root := app.rootCmd()
	root.SetArgs(normalizeTestArgs(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "ssrun: %v\n", err)
	return 2
}

// app holds what every subcommand shares: streams and the log level.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	logLevel       string
	logFormat      string
	log            *slog.Logger
	pluginDir      string     // --plugin-dir of dev and run; "" for the temporary directory
	dryRun         bool       // --dry-run of dev and run
	group          groupFlags // --group and --group-ttl of dev and run
	recordPath     string     // --record of dev and run: the trace file
	// lookupEnv reads the environment (os.LookupEnv; tests replace it).
	lookupEnv func(string) (string, bool)
	fromEnv   map[string]string // flags set from SSRUN_* variables, by name
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ssrun",
		Short: "Script the Azure IoT Operations state store",
		Long: `Script the Azure IoT Operations state store.

Every flag can also be set from the environment: SSRUN_ and the flag's name
in upper case with "-" as "_" (SSRUN_LOG_FORMAT=json, SSRUN_SHUTDOWN_TIMEOUT=30s).
A flag on the command line wins over its variable.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if a.fromEnv, err = applyFlagEnv(cmd.Flags(), a.lookupEnv); err != nil {
				return usageError("%v", err)
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(a.logLevel)); err != nil {
				return usageError("%s %q: want debug, info, warn or error", a.flagSource("log-level"), a.logLevel)
			}
			h, err := logHandler(a.stderr, a.logFormat, lvl)
			if err != nil {
				return usageError("%s %q: %v", a.flagSource("log-format"), a.logFormat, err)
			}
			a.log = slog.New(h)
			return nil
		},
	}
	root.SetVersionTemplate("ssrun {{.Version}}\n")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", "text", "log format: text (key=value) or json (one object per line)")
	root.AddCommand(a.brokerCmd(), a.passwdCmd(), a.kvCmd(), a.devCmd(), a.runCmd(), a.checkCmd(), a.testCmd(), a.newCmd(), a.pushCmd(), a.recordCmd(), a.replayCmd(), a.statusCmd(), a.whyCmd(), a.versionCmd())
	strictUsage(root)
	return root
}

// quiet returns the logger for one-shot commands: warnings and errors only,
// unless --log-level asks for debug.
func (a *app) quiet() *slog.Logger {
	return a.quietAt(slog.LevelWarn)
}

// quietAt is quiet with lines below lvl left out.
func (a *app) quietAt(lvl slog.Level) *slog.Logger {
	if a.logLevel == "debug" {
		return a.log
	}
	h, _ := logHandler(a.stderr, a.logFormat, lvl) // checked by PersistentPreRunE
	return slog.New(h)
}

// usageError reports a command-line mistake (exit status 2).
func usageError(format string, args ...any) error {
	return &exitError{code: 2, msg: "ssrun: " + strings.TrimSpace(fmt.Sprintf(format, args...))}
}

// defaultClientID is the client id of a command that was given none:
// USER-CMD-<random> when it connects as USER, so that an ACL's users:
// section binds a user to its ids with one glob (USER-*; see
// docs/acl.example.yaml), else ssrun-CMD-<random>.
func defaultClientID(user, cmd string) string {
	if user == "" {
		user = "ssrun"
	}
	return user + "-" + cmd + "-" + randomSuffix()
}

// randomSuffix returns 8 random hex digits for generated client ids.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
