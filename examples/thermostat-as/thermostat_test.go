// Package thermostatas tests the AssemblyScript thermostat rule: the
// committed rules/thermostat.wasm, or the module named by
// $SSRUN_THERMOSTAT_AS_MODULE (rebuild-check.sh sets it to a module rebuilt
// from assembly/index.ts with the pinned compiler).
package thermostatas

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/examples/internal/thermotest"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// moduleEnv names a module to test instead of the committed one.
const moduleEnv = "SSRUN_THERMOSTAT_AS_MODULE"

// module returns the path of the module under test.
func module(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(moduleEnv); p != "" {
		t.Logf("testing %s ($%s) instead of the committed rules/thermostat.wasm", p, moduleEnv)
		return p
	}
	return filepath.Join("rules", "thermostat.wasm")
}

// TestThermostat plays the shared thermostat table (examples/internal/
// thermotest) against the module through the real host and WebAssembly
// runtime on the embedded broker.
func TestThermostat(t *testing.T) {
	src, err := os.ReadFile(module(t))
	if err != nil {
		t.Fatal(err)
	}
	rules := t.TempDir()
	if err := os.WriteFile(filepath.Join(rules, "thermostat.wasm"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	rt := examplehost.WASMRuntime(t) // closed after the host, which thermotest closes in its cleanup
	thermotest.Run(t, rules, rt)
}

// script is a started rule on an in-memory host.
type script struct {
	s abi.Script
	h *abitest.Host
}

func startRule(t testing.TB, rt *wasm.Runtime, name string, src []byte) script {
	t.Helper()
	ctx := context.Background()
	p, err := rt.Compile(ctx, name, src)
	if err != nil {
		t.Fatal(err)
	}
	h := abitest.New()
	s, err := p.Start(ctx, h, abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	if _, ok := h.Watches()[thermotest.SetPoint]; !ok {
		t.Fatalf("%s does not watch %s: %v", name, thermotest.SetPoint, h.Watches())
	}
	return script{s, h}
}

// outcome is what handling one set point leaves in the store.
type outcome struct {
	Target, SetPoint, Error string // "<absent>" when absent
	Err                     bool   // the handler failed
}

const absent = "<absent>"

// handle delivers a SET of the set point on an empty store and returns
// the three keys afterwards.
func (r script) handle(t *testing.T, value []byte) outcome {
	t.Helper()
	ctx := context.Background()
	keys := []string{thermotest.Target, thermotest.SetPoint, thermotest.Error}
	for _, k := range keys {
		_ = r.h.Del(ctx, k, abi.DelOptions{})
	}
	err := r.s.Handle(ctx, abi.Event{Key: thermotest.SetPoint, Op: abi.OpSet, Value: value, Version: "v"})
	var got [3]string
	for i, k := range keys {
		got[i] = absent
		if v, ok := r.h.Value(k); ok {
			got[i] = string(v)
		}
	}
	return outcome{Target: got[0], SetPoint: got[1], Error: got[2], Err: err != nil}
}

// goModule builds the Go thermostat (examples/thermostat-go) as its README
// says.
func goModule(t testing.TB) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "thermostat-go.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "../thermostat-go")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// seeds are set points whose reading or writing is easy to get wrong.
func seeds() []string {
	out := []string{
		// the thermotest table
		"21.5", "30", "5", "28", " 22 ", "warm", "19.25",
		// syntax
		"", " ", "+", "-", ".", "e1", "1e", "1e+", "+.5e2", "2.2e1", "22.", ".22e2", "-0", "+0", "0",
		"00022.500", "1.2.3", "--1", "2 2", "22x", "0x10", "0X1p4", "Inf", "-inf", "NaN", "infinity", "1_0",
		"\t22\n", "\v\f\r22 ", "\u00a022", "２２", "22\x00", "\xff", `"22"`, "1e99999999999", "1e-99999999999",
		"1e400", "-1e400", "1e-400", "4.9e-324", "1.7976931348623157e308", "123456789012345678901234567890",
		"0.000000000000000000000000000000000000000000000000000000000000000000000000000000016e81",
		// bounds and their neighbours (ulp is 2^-49 below 16, 2^-48 above)
		"16", "28", "16.0", "28.000", "15.999999999999999", "15.9999999999999999999999", "28.000000000000001",
		"28.00000000000001", "27.99999999999999999999", "16.00000000000000000001", "160e-1", "0.28e2",
		// 16 - 2^-50 (the midpoint below 16: reads as 16) and just below it
		"15.99999999999999911182158029987476766109466552734375",
		"15.99999999999999911182158029987476766109466552734374999",
		// 28 + 2^-49 (the midpoint above 28: reads as 28) and just above it
		"28.0000000000000017763568394002504646778106689453125",
		"28.00000000000000177635683940025046467781066894531250000000000000000001",
		// shortest form with the most digits
		"21.000000000000004", "27.999999999999996", "16.000000000000004", "19.999999999999996",
	}
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := math.Float64bits(16), math.Float64bits(28)
	half := new(big.Float).SetMantExp(big.NewFloat(1), -49) // half the spacing of float64s in [16, 32)
	for range 300 {
		v := math.Float64frombits(lo + r.Uint64N(hi-lo+1))
		mid := new(big.Float).SetPrec(200).SetFloat64(v)
		mid.Add(mid, half)
		out = append(out,
			strconv.FormatFloat(v, 'g', -1, 64),                                 // shortest
			strconv.FormatFloat(v, 'f', 60, 64),                                 // exact
			strconv.FormatFloat(v, 'e', r.IntN(20), 64),                         // rounded
			strconv.FormatFloat(v*1e-3, 'e', -1, 64),                            // scaled
			mid.Text('f', 60),                                                   // the midpoint to the next float64: a tie
			mid.Text('f', 60)+"1",                                               // just above the midpoint
			strconv.FormatFloat(16+float64(r.IntN(1<<16))/(1<<16), 'f', -1, 64), // 16 fraction digits
		)
	}
	for range 100 {
		out = append(out, fmt.Sprintf("%.*f", r.IntN(25), 10+r.Float64()*25))
	}
	return out
}

// FuzzSameAsGo: for any set point, the AssemblyScript rule leaves the store
// exactly as the Go rule (examples/thermostat-go, which reads and writes
// numbers with strconv) does.
func FuzzSameAsGo(f *testing.F) {
	for _, s := range seeds() {
		f.Add([]byte(s))
	}
	src, err := os.ReadFile(module(f))
	if err != nil {
		f.Fatal(err)
	}
	rt := examplehost.WASMRuntime(f)
	as := startRule(f, rt, "thermostat-as.wasm", src)
	goRule := startRule(f, rt, "thermostat-go.wasm", goModule(f))
	f.Fuzz(func(t *testing.T, value []byte) {
		want := goRule.handle(t, value)
		if got := as.handle(t, value); got != want {
			t.Errorf("set point %q:\nassemblyscript %+v\ngo             %+v", value, got, want)
		}
		if want.Err {
			t.Errorf("set point %q: the Go rule failed; logs: %v", value, goRule.h.Logs())
		}
	})
}
