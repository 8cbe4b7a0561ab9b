package assemblyscript

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/ssrun/ssrun/abi"
)

// rawGuest is the test rule instantiated directly on wazero, so that the
// test can hand it any bytes as an event record (the runtime only sends
// well-formed ones). Its host accepts watch, unwatch and log, answers keys
// with keysRec (as any result, through `result` when it does not fit), and
// answers UNAVAILABLE to the rest.
type rawGuest struct {
	alloc, onEvent api.Function
	mem            api.Memory
	logs           []string
	keysRec        []byte
}

// newRawGuest returns the test rule reporting every event it gets
// ("echo-all").
func newRawGuest(t testing.TB) *rawGuest {
	t.Helper()
	g := newRawRule(t)
	if rc, err := g.deliver(abi.AppendEvent(nil, abi.Event{Key: "echo-all", Op: abi.OpSet})); rc != 0 || err != nil {
		t.Fatalf("echo-all: rc %d, %v; logs %q", rc, err, g.logs)
	}
	return g
}

// newRawRule returns the test rule running its commands.
func newRawRule(t testing.TB) *rawGuest {
	t.Helper()
	path := filepath.Join("testdata", "verbs.wasm")
	if p := os.Getenv(moduleEnv); p != "" {
		path = p
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	cm, err := r.CompileModule(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	g := &rawGuest{}
	b := r.NewHostModuleBuilder(abi.ImportModule)
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		if mod != abi.ImportModule {
			continue
		}
		fn := func(_ context.Context, m api.Module, stack []uint64) { stack[0] = uint64(abi.StatusUnavailable) }
		switch name {
		case abi.FnWatch, abi.FnUnwatch:
			fn = func(_ context.Context, m api.Module, stack []uint64) { stack[0] = uint64(abi.StatusOK) }
		case abi.FnKeys:
			fn = func(_ context.Context, m api.Module, stack []uint64) {
				stack[0] = g.result(m, stack[3], stack[4], stack[5])
			}
		case abi.FnResult:
			fn = func(_ context.Context, m api.Module, stack []uint64) {
				stack[0] = g.result(m, stack[0], stack[1], stack[2])
			}
		case abi.FnLog:
			fn = func(_ context.Context, m api.Module, stack []uint64) {
				msg, _ := m.Memory().Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
				g.logs = append(g.logs, string(msg))
				stack[0] = uint64(abi.StatusOK)
			}
		}
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(fn), def.ParamTypes(), def.ResultTypes()).Export(name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		t.Fatal(err)
	}
	g.alloc, g.onEvent, g.mem = mod.ExportedFunction(abi.ExportAlloc), mod.ExportedFunction(abi.ExportOnEvent), mod.Memory()
	return g
}

// result writes keysRec's length at out_len and keysRec at out if it fits
// (status OK), else BUFFER_TOO_SMALL, as the runtime does.
func (g *rawGuest) result(m api.Module, out, outCap, lenPtr uint64) uint64 {
	m.Memory().WriteUint32Le(api.DecodeU32(lenPtr), uint32(len(g.keysRec)))
	if uint32(len(g.keysRec)) > api.DecodeU32(outCap) {
		return uint64(abi.StatusBufferTooSmall)
	}
	m.Memory().Write(api.DecodeU32(out), g.keysRec)
	return uint64(abi.StatusOK)
}

// deliver hands rec to the guest as the host does and returns
// ssrun_on_event's result.
func (g *rawGuest) deliver(rec []byte) (int32, error) {
	ctx := context.Background()
	var ptr uint32
	if len(rec) > 0 {
		res, err := g.alloc.Call(ctx, uint64(len(rec)))
		if err != nil {
			return 0, fmt.Errorf("ssrun_alloc: %w", err)
		}
		ptr = api.DecodeU32(res[0])
		if !g.mem.Write(ptr, rec) {
			return 0, fmt.Errorf("ssrun_alloc(%d) returned %#x, outside memory", len(rec), ptr)
		}
	}
	res, err := g.onEvent.Call(ctx, uint64(ptr), uint64(len(rec)))
	if err != nil {
		return 0, fmt.Errorf("ssrun_on_event: %w", err)
	}
	return api.DecodeI32(res[0]), nil
}

// FuzzEventRecord: the SDK accepts exactly the event records
// abi.DecodeEvent accepts, hands the handler the event they encode (key and
// version decoded as Go decodes UTF-8), rejects the others with a log line,
// and never traps.
func FuzzEventRecord(f *testing.F) {
	for _, ev := range []abi.Event{
		{Key: "event", Op: abi.OpSet, Value: []byte("v\x00\xff"), Version: "001732000000000:00001:StateStore"},
		{Key: "k\xed\xa0\x80\U0001d11e", Op: abi.OpDelete, Version: "\xe2\x82", Resync: true},
		{Key: "lock", Op: abi.OpLockLost},
		{Key: "", Op: abi.OpSet, Value: []byte{}},
		{Key: "door", Op: abi.OpTimer, Value: []byte("open\xff"), Deadline: 1_732_000_000_123, Late: true},
		{Key: "tick", Op: abi.OpTimer, Value: []byte{}, Deadline: -1},
		{Key: "k", Op: abi.OpSet, Value: []byte("v"), Coalesced: 3},
		{Key: "k", Op: abi.OpDelete, Coalesced: 1 << 31},
	} {
		f.Add(abi.AppendEvent(nil, ev))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'v', 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0, 'k', 0, 0, 0, 0, 0, 0, 0, 0, 'x'})
	f.Add([]byte{4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7}) // TIMER, deadline one byte short
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})                      // late on a SET
	g := newRawGuest(f)
	f.Fuzz(func(t *testing.T, rec []byte) {
		g.logs = g.logs[:0]
		rc, err := g.deliver(rec)
		if err != nil {
			t.Fatalf("record %q: %v; logs %q", rec, err, g.logs)
		}
		ev, decodeErr := abi.DecodeEvent(rec)
		if decodeErr != nil {
			if rc != -1 || len(g.logs) != 1 || !strings.HasPrefix(g.logs[0], "ssrun: ") {
				t.Fatalf("record %q (%v): rc %d, logs %q; want -1 and one ssrun: line", rec, decodeErr, rc, g.logs)
			}
			return
		}
		want := fmt.Sprintf("report event op=%s key=%s value=%s text=%s version=%s resync=%t deadline=%d late=%t",
			ev.Op, runes([]byte(ev.Key)), show(ev.Value), runes(ev.Value), runes([]byte(ev.Version)), ev.Resync, ev.Deadline, ev.Late) +
			coalescedSuffix(ev)
		if rc != 0 || len(g.logs) != 1 || g.logs[0] != want {
			t.Fatalf("record %q: rc %d, logs %q; want 0 and %q", rec, rc, g.logs, want)
		}
	})
}
