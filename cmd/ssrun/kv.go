package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// kvOpts are the settings of `ssrun kv`.
type kvOpts struct {
	conn    connFlags
	timeout time.Duration
	output  string // text or json (get, watch)
}

// kvJSON is a key's state as `kv get -o json` and `kv watch -o json` print
// it, one object per line: the value as text when it is UTF-8, else as
// value_base64.
type kvJSON struct {
	Key         string  `json:"key"`
	Op          string  `json:"op,omitempty"` // watch: SET or DELETE
	Found       *bool   `json:"found,omitempty"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 []byte  `json:"value_base64,omitempty"`
	Version     string  `json:"version,omitempty"` // "" for a deletion seen by a re-read: its version is unknown
}

// printJSON prints j as one line, with value when the key has one.
func (a *app) printJSON(j kvJSON, value []byte, hasValue bool) {
	if hasValue {
		if utf8.Valid(value) {
			v := string(value)
			j.Value = &v
		} else {
			j.ValueBase64 = value
		}
	}
	_ = a.jsonLine(j) // every field marshals
}

func (a *app) kvCmd() *cobra.Command {
	var o kvOpts
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Read, write and watch state store keys",
		Long: `Read, write and watch state store keys.

  ssrun kv get KEY [-o json]          -o json: {"key":..,"found":true,"value":..,"version":..}
  ssrun kv set KEY VALUE [--nx | --nex] [--px 10s] [--fence TOKEN]     (VALUE - reads stdin)
  ssrun kv del KEY [--fence TOKEN]
  ssrun kv vdel KEY VALUE [--fence TOKEN]
  ssrun kv watch KEY... [-o json]     -o json: {"key":..,"op":"SET","value":..,"version":..} per line
  ssrun kv keys PATTERN [-o json] [--count]
                                      the keys matching PATTERN (SCAN: * ? [a-z] \x), one per line;
                                      -o json: {"key":..} per line (key_base64 when not UTF-8)

Exit status:
  0  done
  1  not found (get, del, vdel), not applied (set --nx/--nex), value differs (vdel),
     no key matches (keys)
  2  usage: a bad flag or argument
  3  failed: the broker could not be reached in --timeout, or a request failed
  4  not authorized: the broker refused the login (bad user name or password,
     client id not allowed, no Connect grant, banned) or its ACL refused the key`,
	}
	o.conn.register(cmd.PersistentFlags(), "127.0.0.1:1883")
	cmd.PersistentFlags().DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	cmd.PersistentFlags().StringVarP(&o.output, "output", "o", "text", "output of get, watch and keys: text, or json (one object per line, with the version; a value that is not UTF-8 as value_base64)")
	cmd.AddCommand(a.kvGet(&o), a.kvSet(&o), a.kvDel(&o), a.kvVDel(&o), a.kvWatch(&o), a.kvKeys(&o))
	return cmd
}

// kvConnect builds a client from the AIO_* variables and flags and waits for
// the first connection.
func (a *app) kvConnect(ctx context.Context, cmd *cobra.Command, o *kvOpts) (*protocol.Client, error) {
	if o.output != "" && o.output != "text" && o.output != "json" { // "": ssrun record's
		return nil, usageError("--output %q: want text or json", o.output)
	}
	var s connSettings
	if err := s.applyEnv(os.LookupEnv); err != nil {
		return nil, usageError("%v", err)
	}
	if err := o.conn.apply(cmd.Flags(), &s); err != nil {
		return nil, usageError("%v", err)
	}
	cfg, err := s.clientConfig()
	if err != nil {
		return nil, usageError("%v", err)
	}
	if cfg.ClientID == "" {
		cfg.ClientID = defaultClientID(s.Username, "kv")
	}
	cfg.Timeout = o.timeout
	// A refusal ends the command with its own message: the client's log
	// line saying it would only repeat it.
	cfg.Logger = a.quietAt(slog.LevelError + 1)
	if err := probe(ctx, cfg.Servers[0], o.timeout); err != nil {
		return nil, withTLSNote(err, s)
	}
	c, err := protocol.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	wait, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := c.AwaitConnectionOrRefusal(wait); err != nil {
		c.Close()
		var r *protocol.RefusedError
		if errors.As(err, &r) {
			return nil, &exitError{code: exitUnauthorized, msg: fmt.Sprintf("ssrun: connecting to %s: %s", cfg.Servers[0], refusedMessage(r, false))}
		}
		return nil, withTLSNote(fmt.Errorf("connecting to %s: %w", cfg.Servers[0], err), s)
	}
	return c, nil
}

// withClient runs f with a connected client and closes it afterwards. An
// error other than an *exitError ends the command with exitUnauthorized
// when the store refused the key (its ACL), else exitFailed.
func (a *app) withClient(cmd *cobra.Command, o *kvOpts, f func(ctx context.Context, c *protocol.Client) error) error {
	ctx := cmd.Context()
	c, err := a.kvConnect(ctx, cmd, o)
	if err == nil {
		defer c.Close()
		err = f(ctx, c)
	}
	var ee *exitError
	switch {
	case err == nil || errors.As(err, &ee):
		return err
	case errors.Is(err, protocol.ErrNotAuthorized):
		return &exitError{code: exitUnauthorized, msg: "ssrun: " + err.Error()}
	}
	return &exitError{code: exitFailed, msg: "ssrun: " + err.Error()}
}

func (a *app) kvGet(o *kvOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, o, func(ctx context.Context, c *protocol.Client) error {
				res, err := c.Get(ctx, []byte(args[0]), protocol.CallOptions{})
				if err != nil {
					return fmt.Errorf("get %q: %w", args[0], err)
				}
				if o.output == "json" {
					j := kvJSON{Key: args[0], Found: &res.Found}
					if res.Found {
						j.Version = res.Version.String()
					}
					a.printJSON(j, res.Value, res.Found)
				}
				if !res.Found {
					return &exitError{code: 1, msg: fmt.Sprintf("%s: not found", args[0])}
				}
				if o.output != "json" {
					a.stdout.Write(res.Value)
					fmt.Fprintln(a.stdout)
				}
				return nil
			})
		},
	}
}

// fenceFlag parses --fence into an HLC.
type fenceFlag struct{ token hlc.HLC }

func (f *fenceFlag) String() string {
	if f.token.IsZero() {
		return ""
	}
	return f.token.String()
}
func (f *fenceFlag) Set(s string) error {
	t, err := hlc.Parse(s)
	if err != nil {
		return fmt.Errorf("not a fencing token (HLC like 001732000000000:00001:StateStore): %w", err)
	}
	f.token = t
	return nil
}
func (f *fenceFlag) Type() string { return "TOKEN" }

func registerFence(fs *pflag.FlagSet, f *fenceFlag) {
	fs.Var(f, "fence", "fencing token (a lock's version) to send as __ft")
}

// value returns the VALUE argument, or stdin for "-".
func (a *app) value(arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	b, err := io.ReadAll(a.stdin)
	if err != nil {
		return nil, fmt.Errorf("reading the value from stdin: %w", err)
	}
	return b, nil
}

func (a *app) kvSet(o *kvOpts) *cobra.Command {
	var nx, nex bool
	var px string
	var fence fenceFlag
	cmd := &cobra.Command{
		Use:   "set KEY VALUE",
		Short: "Write VALUE to KEY and print the new version",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if nx && nex {
				return usageError("--nx and --nex exclude each other")
			}
			opts := protocol.SetOptions{FencingToken: fence.token}
			switch {
			case nx:
				opts.Condition = protocol.CondNX
			case nex:
				opts.Condition = protocol.CondNEX
			}
			if px != "" {
				d, err := parseDuration(px)
				if err != nil || d < time.Millisecond {
					return usageError("--px %q: want a duration of at least 1ms (e.g. 10s) or milliseconds", px)
				}
				opts.Expiry = d
			}
			val, err := a.value(args[1])
			if err != nil {
				return err
			}
			return a.withClient(cmd, o, func(ctx context.Context, c *protocol.Client) error {
				res, err := c.Set(ctx, []byte(args[0]), val, opts)
				if err != nil {
					return fmt.Errorf("set %q: %w", args[0], err)
				}
				if !res.Applied {
					return &exitError{code: 1, msg: fmt.Sprintf("%s: not applied (stored version %s)", args[0], res.Version)}
				}
				fmt.Fprintf(a.stdout, "OK %s\n", res.Version)
				return nil
			})
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&nx, "nx", false, "write only if KEY is absent")
	fs.BoolVar(&nex, "nex", false, "write only if KEY is absent or holds VALUE")
	fs.StringVar(&px, "px", "", "expire KEY after this long (e.g. 10s, 500ms, or milliseconds)")
	registerFence(fs, &fence)
	return cmd
}

func (a *app) kvDel(o *kvOpts) *cobra.Command {
	var fence fenceFlag
	cmd := &cobra.Command{
		Use:   "del KEY",
		Short: "Delete KEY",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, o, func(ctx context.Context, c *protocol.Client) error {
				n, err := c.Del(ctx, []byte(args[0]), protocol.DelOptions{FencingToken: fence.token})
				return a.deleted("del", args[0], n, err)
			})
		},
	}
	registerFence(cmd.Flags(), &fence)
	return cmd
}

func (a *app) kvVDel(o *kvOpts) *cobra.Command {
	var fence fenceFlag
	cmd := &cobra.Command{
		Use:   "vdel KEY VALUE",
		Short: "Delete KEY if it holds VALUE",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			val, err := a.value(args[1])
			if err != nil {
				return err
			}
			return a.withClient(cmd, o, func(ctx context.Context, c *protocol.Client) error {
				n, err := c.VDel(ctx, []byte(args[0]), val, protocol.DelOptions{FencingToken: fence.token})
				return a.deleted("vdel", args[0], n, err)
			})
		},
	}
	registerFence(cmd.Flags(), &fence)
	return cmd
}

func (a *app) deleted(verb, key string, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s %q: %w", verb, key, err)
	case n == 1:
		fmt.Fprintln(a.stdout, "deleted")
		return nil
	case n == 0:
		return &exitError{code: 1, msg: fmt.Sprintf("%s: not found", key)}
	default:
		return &exitError{code: 1, msg: fmt.Sprintf("%s: value differs, not deleted", key)}
	}
}

func (a *app) kvWatch(o *kvOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "watch KEY...",
		Short: "Print each KEY's value, then every change with its version until interrupted",
		Long: `Print each KEY's current value, then every change with its version until
interrupted. After a lost connection comes back, the keys are read again and
what changed while disconnected is printed (a key deleted meanwhile as
"- DELETE key"), so the output never shows a value that no longer exists.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, o, func(ctx context.Context, c *protocol.Client) error {
				w := &watcher{a: a, c: c, keys: args, seen: map[string]keyState{}, json: o.output == "json"}
				if err := notifyKeys(ctx, c, "watch", args); err != nil {
					return err
				}
				if _, err := w.reread(ctx); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "watching %d key(s); Ctrl-C to stop\n", len(args))
				connected := true
				return eachEvent(ctx, c, "watch", func(ev protocol.Event) error {
					switch ev.Kind {
					case protocol.EventNotify:
						w.print(string(ev.Key), ev.Op, ev.Version, ev.Value)
					case protocol.EventDisconnected:
						connected = false
						a.printEvent(ev)
					case protocol.EventConnected, protocol.EventOverflow:
						if ev.Kind == protocol.EventConnected && connected {
							return nil // the first connection: already read
						}
						connected = true
						n, err := w.reread(ctx)
						if err != nil {
							fmt.Fprintf(a.stderr, "re-reading the watched keys failed: %v\n", err)
							return nil
						}
						fmt.Fprintf(a.stderr, "%s; re-read %d key(s), %d changed meanwhile\n", ev.Kind, len(args), n)
					}
					return nil
				})
			})
		},
	}
}

// watcher prints a set of keys' changes in version order, each once.
type watcher struct {
	a    *app
	c    *protocol.Client
	keys []string
	seen map[string]keyState
	json bool // -o json: one object per change
}

type keyState struct {
	version hlc.HLC // last printed; zero: nothing yet
	present bool
}

// print writes one change unless it is not newer than what was printed (a
// notification queued before a re-read that returned a later version). A
// zero version is a deletion seen by a re-read, whose version is unknown.
func (w *watcher) print(key, op string, version hlc.HLC, value []byte) bool {
	st := w.seen[key]
	if !version.IsZero() && version.Compare(st.version) <= 0 {
		return false
	}
	if op == protocol.OpDelete {
		if !st.present {
			return false
		}
		text := "-" // deleted while disconnected: its version is unknown
		if !version.IsZero() {
			text = version.String()
			st.version = version
		}
		w.seen[key] = keyState{version: st.version, present: false}
		if w.json {
			w.a.printJSON(kvJSON{Key: key, Op: protocol.OpDelete, Version: strings.TrimPrefix(text, "-")}, nil, false)
			return true
		}
		fmt.Fprintf(w.a.stdout, "%s DELETE %s\n", text, shown(key))
		return true
	}
	w.seen[key] = keyState{version: version, present: true}
	if w.json {
		w.a.printJSON(kvJSON{Key: key, Op: protocol.OpSet, Version: version.String()}, value, true)
		return true
	}
	fmt.Fprintf(w.a.stdout, "%s SET %s %s\n", version, shown(key), shown(string(value)))
	return true
}

// reread GETs every key and prints those whose version differs from the
// last printed one; it returns how many it printed.
func (w *watcher) reread(ctx context.Context) (int, error) {
	n := 0
	for _, k := range w.keys {
		res, err := w.c.Get(ctx, []byte(k), protocol.CallOptions{})
		if err != nil {
			return n, fmt.Errorf("get %q: %w", k, err)
		}
		printed := false
		if res.Found {
			printed = w.print(k, protocol.OpSet, res.Version, res.Value)
		} else {
			printed = w.print(k, protocol.OpDelete, hlc.HLC{}, nil)
		}
		if printed {
			n++
		}
	}
	return n, nil
}

func (a *app) printEvent(ev protocol.Event) {
	switch ev.Kind {
	case protocol.EventNotify:
		if ev.Op == protocol.OpSet {
			fmt.Fprintf(a.stdout, "%s SET %s %s\n", ev.Version, shown(string(ev.Key)), shown(string(ev.Value)))
		} else {
			fmt.Fprintf(a.stdout, "%s %s %s\n", ev.Version, ev.Op, shown(string(ev.Key)))
		}
	case protocol.EventDisconnected:
		fmt.Fprintf(a.stderr, "connection lost (%s); reconnecting\n", shown(fmt.Sprint(ev.Err)))
	case protocol.EventConnected:
		fmt.Fprintln(a.stderr, "connected")
	}
}
