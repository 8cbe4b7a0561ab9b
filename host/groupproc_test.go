package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/protocol"
)

// Environment of the group helper host: the test binary run again as a
// host process of a cluster's group, so that a test can stop it with
// SIGSTOP.
const (
	groupHelperEnv = "SSRUN_HOST_TEST_GROUP_HELPER" // the broker's address
	groupHelperDir = "SSRUN_HOST_TEST_GROUP_DIR"    // the rules folder
	groupHelperTTL = "SSRUN_HOST_TEST_GROUP_TTL"    // the group's ttl
)

// groupHelperHost runs a host of the group "g" on the broker named by
// groupHelperEnv, with the rules of the folder, as cluster.handler does
// (host index "p"). Before writing the value "stop" it prints "handling
// KEY" and waits for a line on its standard input; then it prints
// "wrote" or "refused STATUS". It prints "ready" once the rules are
// loaded, then runs until killed.
func groupHelperHost() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "group helper host:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := helperClient(ctx, os.Getenv(groupHelperEnv), "group-helper", time.Minute, quiet)
	if err != nil {
		fail(err)
	}
	ttl, err := time.ParseDuration(os.Getenv(groupHelperTTL))
	if err != nil {
		fail(err)
	}
	dir := os.Getenv(groupHelperDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.gorule"))
	if err != nil {
		fail(err)
	}
	in := bufio.NewReader(os.Stdin)
	rt := &goRuntime{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".gorule")
		rt.register(name, goRule{init: watchInit("in/" + name), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if ev.Op != abi.OpSet {
				return nil
			}
			stop := string(ev.Value) == "stop"
			if stop {
				fmt.Println("handling", ev.Key)
				if _, err := in.ReadString('\n'); err != nil {
					return err
				}
			}
			_, err := h.Set(ctx, "out/"+name, fmt.Appendf(nil, "%s@p", ev.Value), abi.SetOptions{})
			if stop {
				if err != nil {
					fmt.Println("refused", abi.StatusOf(err), err)
				} else {
					fmt.Println("wrote")
				}
			}
			return err
		}})
	}
	h, err := New(Config{Store: c, Runtimes: []abi.Runtime{rt}, Logger: quiet, Group: &GroupConfig{Name: "g", TTL: ttl},
		Defaults: RuleConfig{Timeout: time.Hour}})
	if err != nil {
		fail(err)
	}
	if err := h.LoadDir(ctx, dir); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	select {} // until killed
}

// procHost is a group helper host process.
type procHost struct {
	cmd   *exec.Cmd
	lines *bufio.Reader
	stdin io.Writer
}

// startGroupHelper runs groupHelperHost on the cluster's broker and rules.
func (c *cluster) startGroupHelper() *procHost {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), groupHelperEnv+"="+c.addr, groupHelperDir+"="+c.dir, groupHelperTTL+"="+c.group.TTL.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		resume(cmd.Process) // if a test stopped it
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	p := &procHost{cmd: cmd, lines: bufio.NewReader(out), stdin: stdin}
	if line := p.line(c.t); line != "ready" {
		c.t.Fatalf("group helper host: %q", line)
	}
	return p
}

// line reads the next line the helper prints.
func (p *procHost) line(t testing.TB) string {
	t.Helper()
	line, err := p.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("group helper host: %v", err)
	}
	return strings.TrimSpace(line)
}

// leaseHolder returns the holder of the rule's ownership lease ("" when
// none).
func (c *cluster) leaseHolder(t *testing.T, rule string) string {
	res, err := c.user.Get(context.Background(), []byte(ReservedPrefix+"group/"+c.group.Name+"/rule/"+membership.RuleHash(rule+".gorule")), protocol.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Value)
}
