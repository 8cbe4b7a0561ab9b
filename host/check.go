package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/abandon"
	"github.com/ssrun/ssrun/host/internal/guard"
	"github.com/ssrun/ssrun/host/rulefile"
)

// Checker proves rule files without a store (what `ssrun check` does): it
// compiles each, then starts it as Load would, under its limits and
// permissions, against an in-memory store (abitest.Host) so that nothing
// leaves the process. A file fails Check whenever Load would refuse it: a
// compile error, an error in its top-level code or initialisation, a Lua
// rule without on_event, a plugin that does not handshake, a WebAssembly
// module with wrong imports or exports. Each compile and start is bounded
// like a load: a runtime that has not returned within the timeout plus a
// grace (DefaultGrace, or the timeout if shorter) is abandoned.
type Checker struct {
	runtimes       map[string]abi.Runtime
	timeout, grace time.Duration
	calls          *abandon.Tracker
	defaults       RuleConfig
	rules          map[string]RuleConfig
}

// NewChecker returns a Checker that compiles with runtimes, each compile
// under timeout (DefaultLoadTimeout when zero).
func NewChecker(runtimes []abi.Runtime, timeout time.Duration) *Checker {
	if timeout <= 0 {
		timeout = DefaultLoadTimeout
	}
	c := &Checker{runtimes: map[string]abi.Runtime{}, timeout: timeout, grace: min(timeout, DefaultGrace), calls: abandon.NewTracker(clock.Real{})}
	for _, rt := range runtimes {
		c.runtimes[rt.Kind()] = rt
	}
	return c
}

// SetRuleConfig gives the rules the settings Config.Defaults and
// Config.Rules give them in a Host: each rule starts under its limits, and
// its calls at start are held to its permissions. It fails, naming the
// entry, on settings New would refuse.
func (c *Checker) SetRuleConfig(defaults RuleConfig, rules map[string]RuleConfig) error {
	if err := validateRuleConfigs(defaults, rules); err != nil {
		return err
	}
	c.defaults, c.rules = defaults, rules
	return nil
}

// Files lists the rule files in dir that a Host with the Checker's runtimes
// loads (LoadDir), in name order; other files (READMEs, tests, data) are
// not rules.
func (c *Checker) Files(dir string) ([]string, error) {
	return rulefile.List(dir, c.runtimes, nil)
}

// Check compiles the rule file at path with the runtime for its kind and
// starts it against an in-memory store, then stops it. The error names the
// file: not a rule file (and why), a *abi.CompileError, the failure to start
// (naming the line where the runtime knows it), or a *StuckError when the
// runtime did not return in time.
func (c *Checker) Check(ctx context.Context, path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	kind, _ := rulefile.Kind(path, info)
	rt, ok := c.runtimes[kind]
	if !ok {
		if rulefile.LacksExecBit(path, info) {
			return fmt.Errorf("%s: not a rule file: %s: chmod +x %s", path, rulefile.NotPluginHint, path)
		}
		return fmt.Errorf("%s: not a rule file (want .lua, .wasm or an executable plugin)", path)
	}
	src, err := rulefile.Read(path)
	if err != nil {
		return err // it names the file
	}
	cfg, err := loadableConfigFor(c.defaults, c.rules, path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout+cfg.Timeout)
	defer cancel()
	prog, err := abandon.Aside(c.calls, ctx, path, "compile", c.grace, func(ctx context.Context) (abi.Program, error) {
		return rt.Compile(ctx, path, src)
	}, nil)
	if err != nil {
		return err
	}
	store := &checkStore{Host: abitest.New(), rule: filepath.Base(path)}
	store.MaxWatchedKeys = cfg.MaxWatchedKeys
	script, err := abandon.Aside(c.calls, ctx, path, "start", c.grace, func(ctx context.Context) (abi.Script, error) {
		return prog.Start(ctx, checkedHost(store, cfg), cfg.limits())
	}, func(late abi.Script) { _ = late.Close(context.Background()) })
	if err != nil {
		var se *StuckError
		if !errors.As(err, &se) && !strings.Contains(err.Error(), path) {
			err = fmt.Errorf("start %s: %w", path, err)
		}
		if missed := store.missed(); len(missed) > 0 {
			err = fmt.Errorf("%w (ssrun check starts a rule against an empty store: its top-level code read %s, absent here, which the store of dev or run may have)", err, strings.Join(missed, ", "))
		}
		return err // names the file (and the line, where the runtime knows it)
	}
	if err := script.Close(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", path, err)
	}
	return nil
}

// checkedHost is the abi.Host a checked rule starts with: the host's guard
// (host/internal/guard: the reserved keys, the rule's permissions and
// limits, as the host checks them), in front of store.
func checkedHost(store *checkStore, cfg RuleConfig) abi.Host {
	return guard.New(store, guard.Rule{
		Name:     store.rule,
		Reserved: ReservedPrefix,
		MaxTimer: MaxTimerName,
		Limits:   cfg.guardLimits,
		Closed:   func() bool { return false },
	})
}

// checkStore is the store of a checked rule (empty, in memory), behind its
// guard (checkedHost), remembering the keys the rule read and found
// absent: in an empty store, a rule whose start needs a key fails, and the
// error says so.
type checkStore struct {
	*abitest.Host
	rule    string
	mu      sync.Mutex
	missing []string
}

// Get implements abi.Host.
func (s *checkStore) Get(ctx context.Context, key string) (abi.Value, error) {
	v, err := s.Host.Get(ctx, key)
	if abi.StatusOf(err) == abi.StatusNotFound {
		s.mu.Lock()
		if len(s.missing) < 4 && !slices.Contains(s.missing, strconv.Quote(key)) {
			s.missing = append(s.missing, strconv.Quote(key))
		}
		s.mu.Unlock()
	}
	return v, err
}

// missed returns the keys read and found absent, quoted.
func (s *checkStore) missed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.missing)
}

// Close waits until the compiles Check abandoned have ended, or ctx ends,
// and names those still running.
func (c *Checker) Close(ctx context.Context) error {
	if left := c.calls.Wait(ctx); len(left) > 0 {
		return fmt.Errorf("%d compile(s) still running: %s", len(left), strings.Join(left, ", "))
	}
	return nil
}
