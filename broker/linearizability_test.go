package broker_test

// A linearizability test of the store with porcupine, as etcd's robustness
// tests do: concurrent clients run GET / SET (plain, NX, NEX) / DEL / VDEL on
// a few keys while their connections are cut mid-request and their sessions
// taken over by another connection with the same client id; the recorded
// history, versions included, must have a sequential explanation.
//
// Short form (CI): 4 clients x 150 operations. Long form:
//
//	SSRUN_HAMMER=1 go test ./broker -run Linearizability -v

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

type linInput struct {
	op    string // get set setnx setnex del vdel
	key   string
	value string
}

type linOutput struct {
	unknown bool // the call failed after its request may have reached the store
	ok      bool // get: found; set*: applied
	n       int64
	value   string
	version hlc.HLC // get and set*: the reply's version
}

// linState is one key's state. version is the current version when known;
// after an operation of unknown outcome that may have written, only a lower
// bound (floor) is known.
type linState struct {
	present bool
	value   string
	version hlc.HLC // zero: unknown (see floor)
	floor   hlc.HLC // every later version is above it
}

func (s linState) above(v hlc.HLC) bool { return v.Compare(s.floor) > 0 }

// matches reports whether v can be the current version; it returns the state
// with v as the known version.
func (s linState) matches(v hlc.HLC) (linState, bool) {
	if s.version.IsZero() {
		if !s.above(v) {
			return s, false
		}
		s.version, s.floor = v, v
		return s, true
	}
	return s, v == s.version
}

func linStep(st, in, out any) []any {
	s, i, o := st.(linState), in.(linInput), out.(linOutput)
	written := func(v hlc.HLC) []any { // an applied write with version v
		if !s.above(v) || (!s.version.IsZero() && v.Compare(s.version) <= 0) {
			return nil
		}
		return []any{linState{present: true, value: i.value, version: v, floor: v}}
	}
	notApplied := func() []any {
		if n, ok := s.matches(o.version); ok {
			return []any{n}
		}
		return nil
	}
	if o.unknown {
		out := []any{s}
		floor := s.floor
		if !s.version.IsZero() {
			floor = s.version
		}
		switch i.op {
		case "set":
			out = append(out, linState{present: true, value: i.value, floor: floor})
		case "setnx", "setnex":
			if !s.present || (i.op == "setnex" && s.value == i.value) {
				out = append(out, linState{present: true, value: i.value, floor: floor})
			}
		case "del", "vdel":
			if s.present && (i.op == "del" || s.value == i.value) {
				out = append(out, linState{floor: floor})
			}
		}
		return out
	}
	switch i.op {
	case "get":
		if o.ok != s.present {
			return nil
		}
		if !o.ok {
			return []any{s}
		}
		if o.value != s.value {
			return nil
		}
		return notApplied()
	case "set":
		if !o.ok {
			return nil
		}
		return written(o.version)
	case "setnx", "setnex":
		can := !s.present || (i.op == "setnex" && s.value == i.value)
		if o.ok != can {
			return nil
		}
		if o.ok {
			return written(o.version)
		}
		return notApplied()
	case "del", "vdel":
		switch {
		case !s.present:
			if o.n != 0 {
				return nil
			}
			return []any{s}
		case i.op == "vdel" && s.value != i.value:
			if o.n != -1 {
				return nil
			}
			return []any{s}
		case o.n != 1:
			return nil
		}
		// The client does not report the removed entry's version.
		floor := s.floor
		if !s.version.IsZero() {
			floor = s.version
		}
		return []any{linState{floor: floor}}
	}
	return nil
}

var linModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linInput).key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: linStep,
	DescribeOperation: func(in, out any) string {
		i, o := in.(linInput), out.(linOutput)
		if o.unknown {
			return fmt.Sprintf("%s(%s,%s) -> ?", i.op, i.key, i.value)
		}
		return fmt.Sprintf("%s(%s,%s) -> ok=%v n=%d %q %s", i.op, i.key, i.value, o.ok, o.n, o.value, o.version)
	},
	DescribeState: func(st any) string {
		s := st.(linState)
		if !s.present {
			return "absent"
		}
		return fmt.Sprintf("%q@%s", s.value, s.version)
	},
}

func TestLinearizability(t *testing.T) {
	clients, opsPer := 4, 150
	if os.Getenv("SSRUN_HAMMER") != "" {
		clients, opsPer = 8, 2000
	}
	b := brokertest.Start(t)
	keys := []string{"a", "b", "c"}
	var seq atomic.Int64 // the history's clock: call and return order
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in linInput, call int64, out linOutput) {
		ret := seq.Add(1)
		if out.unknown {
			ret = 1 << 62 // may take effect any time later
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}

	proxies := make([]*testnet.Proxy, clients)
	conns := make([]*protocol.Client, clients)
	for i := range clients {
		proxies[i] = testnet.NewProxy(t, b.Addr())
		c, err := protocol.New(context.Background(), protocol.Config{
			Servers:          []string{proxies[i].Addr()},
			ClientID:         fmt.Sprintf("lin-%d", i),
			CleanStart:       true,
			Timeout:          5 * time.Second,
			ReconnectBackoff: func(int) time.Duration { return time.Millisecond },
			Logger:           slog.New(slog.DiscardHandler), // the faults make them talk
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range conns {
		if err := c.AwaitConnection(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Faults: cut a client's connection mid-traffic, and take its session
	// over with a second connection under the same client id.
	var faults, takeovers atomic.Int64
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			i := rng.IntN(clients)
			if rng.IntN(3) == 0 {
				thief, err := protocol.New(ctx, protocol.Config{Servers: []string{b.Addr()}, ClientID: fmt.Sprintf("lin-%d", i), Timeout: time.Second,
					Logger: slog.New(slog.DiscardHandler)})
				if err == nil {
					if thief.AwaitConnection(ctx) == nil {
						takeovers.Add(1)
					}
					_ = thief.Close()
				}
			} else {
				proxies[i].Cut()
				faults.Add(1)
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				proxies[i].Heal()
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(10+rng.IntN(30)) * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	var unknown, skipped atomic.Int64
	for ci, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			for j := 0; j < opsPer; j++ {
				in := linInput{key: keys[rng.IntN(len(keys))]}
				switch r := rng.IntN(10); {
				case r < 3:
					in.op = "get"
				case r < 5:
					in.op, in.value = "set", fmt.Sprintf("c%d-%d", ci, j)
				case r < 6:
					in.op, in.value = "setnx", fmt.Sprintf("c%d-%d", ci, j)
				case r < 7:
					in.op, in.value = "setnex", []string{"x", "y"}[rng.IntN(2)]
				case r < 8:
					in.op = "del"
				default:
					in.op, in.value = "vdel", []string{"x", "y"}[rng.IntN(2)]
				}
				call := seq.Add(1)
				out, err := linCall(ctx, c, in)
				for errors.Is(err, protocol.ErrNotConnected) {
					// Never sent: no effect, not part of the history. Wait
					// for the connection and try again.
					skipped.Add(1)
					if err := c.AwaitConnection(ctx); err != nil {
						t.Errorf("client %d: %v", ci, err)
						return
					}
					call = seq.Add(1)
					out, err = linCall(ctx, c, in)
				}
				switch {
				case errors.Is(err, protocol.ErrConnectionLost), errors.Is(err, protocol.ErrTimeout):
					out = linOutput{unknown: true}
					unknown.Add(1)
				case err != nil:
					t.Errorf("client %d: %s %s: %v", ci, in.op, in.key, err)
					return
				}
				record(ci, in, call, out)
			}
		}()
	}
	wg.Wait()
	cancel()
	fwg.Wait()

	t.Logf("%d operations (%d of unknown outcome, %d not sent), %d connection cuts, %d session takeovers",
		len(history), unknown.Load(), skipped.Load(), faults.Load(), takeovers.Load())
	res, info := porcupine.CheckOperationsVerbose(linModel.ToModel(), history, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := filepath.Join(t.TempDir(), "linearizability.html")
		if err := porcupine.VisualizePath(linModel.ToModel(), info, path); err == nil {
			if dst := os.Getenv("SSRUN_LIN_OUT"); dst != "" {
				if data, err := os.ReadFile(path); err == nil {
					_ = os.WriteFile(dst, data, 0o644)
				}
			}
		}
		t.Fatalf("the history is not linearizable (set SSRUN_LIN_OUT=file.html to keep the visualization)")
	default:
		t.Fatalf("the check did not finish within its time limit (%v)", res)
	}
}

func linCall(ctx context.Context, c *protocol.Client, in linInput) (linOutput, error) {
	k, v := []byte(in.key), []byte(in.value)
	switch in.op {
	case "get":
		r, err := c.Get(ctx, k, protocol.CallOptions{})
		return linOutput{ok: r.Found, value: string(r.Value), version: r.Version}, err
	case "set", "setnx", "setnex":
		opts := protocol.SetOptions{}
		switch in.op {
		case "setnx":
			opts.Condition = protocol.CondNX
		case "setnex":
			opts.Condition = protocol.CondNEX
		}
		r, err := c.Set(ctx, k, v, opts)
		return linOutput{ok: r.Applied, version: r.Version}, err
	case "del":
		n, err := c.Del(ctx, k, protocol.DelOptions{})
		return linOutput{n: n}, err
	default:
		n, err := c.VDel(ctx, k, v, protocol.DelOptions{})
		return linOutput{n: n}, err
	}
}
