package wasm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/ssrun/ssrun/abi"
)

// exportInitialize is the reactor initialisation export (optional).
const exportInitialize = "_initialize"

// requiredExports are the guest exports of ABI v1 and their signatures.
var requiredExports = []struct {
	name            string
	params, results []api.ValueType
}{
	{abi.ExportABIVersion, nil, []api.ValueType{i32}},
	{abi.ExportAlloc, []api.ValueType{i32}, []api.ValueType{i32}},
	{abi.ExportOnEvent, []api.ValueType{i32, i32}, []api.ValueType{i32}},
}

// signature formats a function type, e.g. "(i32, i64) -> (i32)".
func signature(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	return names(params) + " -> " + names(results)
}

// hostSignatures maps each ABI v1 host function to its signature.
var hostSignatures = func() map[string]string {
	m := make(map[string]string, len(hostFuncs))
	for _, f := range hostFuncs {
		m[f.name] = signature(f.params, []api.ValueType{i32})
	}
	return m
}()

// checkModule runs the static load checks; it returns "" or every problem
// found, each naming the import or export.
func checkModule(cm wazero.CompiledModule, e *engine) string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		got := signature(def.ParamTypes(), def.ResultTypes())
		switch mod {
		case abi.ImportModule:
			want, ok := hostSignatures[name]
			if !ok {
				add("import %s.%s is not part of ssrun ABI v%d", mod, name, abi.Version)
			} else if got != want {
				add("import %s.%s has signature %s; ssrun ABI v%d has %s", mod, name, got, abi.Version, want)
			}
		case wasi_snapshot_preview1.ModuleName:
			want, ok := e.wasi[name]
			if !ok {
				add("import %s.%s is not a WASI preview 1 function", mod, name)
			} else if got != want {
				add("import %s.%s has signature %s; WASI preview 1 has %s", mod, name, got, want)
			}
		default:
			add("import %s.%s: a rule may import only from %q and %q", mod, name, abi.ImportModule, wasi_snapshot_preview1.ModuleName)
		}
	}
	for _, def := range cm.ImportedMemories() {
		mod, name, _ := def.Import()
		add("imports its memory (%s.%s); a rule must define and export it as \"memory\"", mod, name)
	}

	exports := cm.ExportedFunctions()
	if _, ok := exports["_start"]; ok {
		if _, ok := exports[exportInitialize]; !ok {
			add("is a WASI command (exports _start); build a reactor, e.g. GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared")
		}
	}
	if def, ok := exports[exportInitialize]; ok {
		if got := signature(def.ParamTypes(), def.ResultTypes()); got != signature(nil, nil) {
			add("export %s has signature %s; want %s", exportInitialize, got, signature(nil, nil))
		}
	}
	if def, ok := exports[abi.ExportCoalesced]; ok {
		if got, want := signature(def.ParamTypes(), def.ResultTypes()), signature(nil, []api.ValueType{i32}); got != want {
			add("export %s has signature %s; want %s", abi.ExportCoalesced, got, want)
		}
	}
	if len(cm.ImportedMemories()) == 0 {
		if _, ok := cm.ExportedMemories()["memory"]; !ok {
			add("does not export its memory as \"memory\"")
		}
	}
	for _, x := range requiredExports {
		def, ok := exports[x.name]
		want := signature(x.params, x.results)
		if !ok {
			add("missing export %s %s (the ssrun guest SDK provides it)", x.name, want)
		} else if got := signature(def.ParamTypes(), def.ResultTypes()); got != want {
			add("export %s has signature %s; ABI v%d wants %s", x.name, got, abi.Version, want)
		}
	}
	return strings.Join(problems, "; ")
}

// probe instantiates cm once as the load check: it runs _initialize under
// the default limits against probeHost and checks ssrun_abi_version. It
// returns "" or the problem.
func (r *Runtime) probe(ctx context.Context, name string, e *engine, cm wazero.CompiledModule) string {
	output := func(stream string) *lineWriter {
		return &lineWriter{emit: func(line string) {
			r.log.Debug("wasm: rule output during load check", "rule", name, "stream", stream, "line", line)
		}}
	}
	stdout, stderr := output("stdout"), output("stderr")
	c := &caller{host: probeHost{r: r, rule: name}}
	timeout := abi.DefaultCallTimeout
	var g guard // Close stops the check; load then reports ErrClosed
	if err := r.track(&g); err != nil {
		return err.Error()
	}
	defer r.untrack(&g)
	in, err := r.instantiate(ctx, e, cm, moduleConfig(name, stdout, stderr), c, &g, timeout)
	stdout.Flush()
	stderr.Flush()
	if err != nil {
		return "initialisation failed during the load check (where store verbs other than watch, unwatch, watch_pattern, unwatch_pattern, log, timer, cancel and now fail with UNAVAILABLE): " +
			classify(err, stderr.sawOOM || in.atLimit(e), timeout).Error()
	}
	defer r.discard(in)
	fn := in.mod.ExportedFunction(abi.ExportABIVersion)
	callCtx, cancel, err := g.begin(ctx, timeout)
	if err != nil {
		return err.Error()
	}
	defer g.end(cancel)
	stack := []uint64{0}
	if err := in.call(callCtx, fn, stack); err != nil {
		return abi.ExportABIVersion + " failed: " + classify(err, false, timeout).Error()
	}
	if v := api.DecodeI32(stack[0]); v != abi.Version {
		return fmt.Sprintf("built for ssrun ABI v%d; this host speaks v%d", v, abi.Version)
	}
	return ""
}

// probeHost is the Host of the load check instance: watches, timers and
// logs are accepted (and dropped), the store is unavailable.
type probeHost struct {
	r    *Runtime
	rule string
}

func (h probeHost) unavailable(verb, key string) error {
	return abi.Errorf(abi.StatusUnavailable, "%s %q: the store is not available during the load check", verb, key)
}

func (h probeHost) Get(_ context.Context, key string) (abi.Value, error) {
	return abi.Value{}, h.unavailable(abi.FnGet, key)
}

func (h probeHost) Set(_ context.Context, key string, _ []byte, _ abi.SetOptions) (string, error) {
	return "", h.unavailable(abi.FnSet, key)
}

func (h probeHost) Del(_ context.Context, key string, _ abi.DelOptions) error {
	return h.unavailable(abi.FnDel, key)
}

func (h probeHost) VDel(_ context.Context, key string, _ []byte, _ abi.DelOptions) error {
	return h.unavailable(abi.FnVDel, key)
}

func (h probeHost) Watch(context.Context, string, abi.WatchOptions) error { return nil }
func (h probeHost) Unwatch(context.Context, string) error                 { return nil }

// WatchPattern and UnwatchPattern are accepted like Watch; Keys reads the
// store, which is unavailable.
func (h probeHost) WatchPattern(context.Context, string, abi.WatchOptions) error { return nil }
func (h probeHost) UnwatchPattern(context.Context, string) error                 { return nil }

func (h probeHost) Keys(_ context.Context, pattern string, _ abi.KeysOptions) ([]string, error) {
	return nil, h.unavailable(abi.FnKeys, pattern)
}

func (h probeHost) Lock(_ context.Context, name string, _ time.Duration, _ abi.LockOptions) (string, error) {
	return "", h.unavailable(abi.FnLock, name)
}

func (h probeHost) Unlock(_ context.Context, name string) error {
	return h.unavailable(abi.FnUnlock, name)
}

func (h probeHost) Log(level int32, msg string) {
	h.r.log.Debug("wasm: rule log during load check", "rule", h.rule, "level", level, "msg", msg)
}

// Timer accepts and drops the timer: a rule may arm one in _initialize.
func (h probeHost) Timer(context.Context, string, time.Duration, abi.TimerOptions) error { return nil }
func (h probeHost) Cancel(context.Context, string) error                                 { return nil }
func (h probeHost) Now() int64                                                           { return time.Now().UnixMilli() }
