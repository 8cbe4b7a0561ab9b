package host

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Checker compiles rule files without running them (what `ssrun check`
// does), each compile bounded like a load: a runtime that has not returned
// within the timeout plus a grace (DefaultGrace, or the timeout if shorter)
// is abandoned.
type Checker struct {
	runtimes       map[string]abi.Runtime
	timeout, grace time.Duration
	calls          *tracker
}

// NewChecker returns a Checker that compiles with runtimes, each compile
// under timeout (DefaultLoadTimeout when zero).
func NewChecker(runtimes []abi.Runtime, timeout time.Duration) *Checker {
	if timeout <= 0 {
		timeout = DefaultLoadTimeout
	}
	c := &Checker{runtimes: map[string]abi.Runtime{}, timeout: timeout, grace: min(timeout, DefaultGrace), calls: newTracker()}
	for _, rt := range runtimes {
		c.runtimes[rt.Kind()] = rt
	}
	return c
}

// Check compiles the rule file at path with the runtime for its kind. The
// error names the file: not a rule file (and why), a *abi.CompileError, or a
// *StuckError when the runtime did not return in time.
func (c *Checker) Check(ctx context.Context, path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	kind, _ := RuleKind(path, info)
	rt, ok := c.runtimes[kind]
	if !ok {
		if lacksExecBit(path, info) {
			return fmt.Errorf("%s: not a rule file: %s: chmod +x %s", path, notPluginHint, path)
		}
		return fmt.Errorf("%s: not a rule file (want .lua, .wasm or an executable plugin)", path)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err = aside(c.calls, ctx, path, "compile", c.grace, func(ctx context.Context) (abi.Program, error) {
		return rt.Compile(ctx, path, src)
	}, nil)
	return err
}

// Close waits until the compiles Check abandoned have ended, or ctx ends,
// and names those still running.
func (c *Checker) Close(ctx context.Context) error {
	if left := c.calls.wait(ctx); len(left) > 0 {
		return fmt.Errorf("%d compile(s) still running: %s", len(left), strings.Join(left, ", "))
	}
	return nil
}
