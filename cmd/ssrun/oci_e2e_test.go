package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

// thermostatProject lays out the Go thermostat example as its README
// builds it, in a temporary folder: examples/thermostat-go's sources, and
// rules/ with the module built from them (built with ldflags), the
// thermostat's shared test file and an ssrun.yaml that canaries the rule.
func thermostatProject(t *testing.T, name string, ldflags ...string) string {
	t.Helper()
	wasm, err := builds.WASM(name, "../../examples/thermostat-go", ldflags...)
	if err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(t.TempDir(), "thermostat-go")
	rules := filepath.Join(proj, "rules")
	if err := os.MkdirAll(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"main.go", "README.md"} {
		copyFile(t, filepath.Join("../../examples/thermostat-go", f), filepath.Join(proj, f), 0o644)
	}
	copyFile(t, wasm, filepath.Join(rules, "thermostat.wasm"), 0o644)
	copyFile(t, "../../examples/thermostat-as/rules/thermostat.test.yaml", filepath.Join(rules, "thermostat.test.yaml"), 0o644)
	cfg := "rules:\n  thermostat.wasm:\n    canary: {events: 3}\n"
	testutil.WriteFiles(t, rules, map[string]string{"ssrun.yaml": cfg})
	return proj
}

// The binaries, end to end: `ssrun push` of the Go thermostat (a 2.8 MB
// WebAssembly rule, over a ConfigMap's 1 MiB) to a registry on loopback,
// `ssrun test` of the pushed artifact, `ssrun run oci://REF` against
// `ssrun broker` (both on random loopback ports): the rule reacts. Then a
// changed build (stripped: other bytes, same behaviour) pushed to the same
// tag takes over through the canary while set points keep coming, each
// one handled (a lost event would leave its target unwritten and time the
// wait out).
func TestOCIEndToEndBinaries(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	ref := reg.Host + "/rules/thermostat:live"
	flags := ociArgs(t)
	bin := func(args ...string) result {
		t.Helper()
		return runBin(t, nil, args...)
	}

	v1 := thermostatProject(t, "thermostat.wasm")
	push1 := bin(append([]string{"push", v1, ref}, flags...)...)
	if push1.code != 0 || !strings.Contains(push1.stderr, "thermostat.wasm") {
		t.Fatalf("push v1: %+v", push1)
	}
	pinned1 := strings.TrimSpace(push1.stdout)
	if r := bin(append([]string{"test", pinned1}, flags...)...); r.code != 0 {
		t.Fatalf("ssrun test of the pushed artifact: %+v", r)
	}

	broker := startProc(t, "broker", "--listen", "127.0.0.1:0")
	addr := waitOutput(t, broker.stdout, regexp.MustCompile(`listening on (\S+)\n`))[1]
	run := startProc(t, append([]string{"run", "oci://" + ref, "--broker", addr, "--pull-interval", "100ms", "--oci-cache", t.TempDir()}, flags...)...)
	waitOutput(t, run.stdout, regexp.MustCompile(`ssrun run: 1 rule\(s\) from `))
	kv := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(bin(append([]string{"kv", "--broker", addr}, args...)...).stdout)
	}
	if out := kv("set", "thermostat1/setPoint", "30"); !strings.HasPrefix(out, "OK ") {
		t.Fatalf("kv set: %q", out)
	}
	testutil.WaitFor(t, "the rule to clamp 30 to 28", func() bool { return kv("get", "hvac1/target") == "28" })

	v2 := thermostatProject(t, "thermostat-stripped.wasm", "-s", "-w")
	push2 := bin(append([]string{"push", v2, ref}, flags...)...)
	pinned2 := strings.TrimSpace(push2.stdout)
	if push2.code != 0 || pinned2 == pinned1 {
		t.Fatalf("push v2: %+v (v1 was %s)", push2, pinned1)
	}
	// Set points 17.01, 17.02, ...: each distinct, inside [16, 28], so
	// each event's own target is what the rule must write.
	for i := 1; ; i++ {
		sp := strconv.FormatFloat(17+float64(i)/100, 'f', -1, 64)
		if out := kv("set", "thermostat1/setPoint", sp); !strings.HasPrefix(out, "OK ") {
			t.Fatalf("kv set: %q", out)
		}
		testutil.WaitFor(t, "hvac1/target "+sp, func() bool { return kv("get", "hvac1/target") == sp })
		if strings.Contains(run.stderr.String(), `msg="canary passed: the new version is live" rule=thermostat.wasm`) {
			break
		}
		if i == 2000 {
			t.Fatalf("the new version did not go live after %d events:\n%s", i, run.stderr)
		}
	}
	log := run.stderr.String()
	if !strings.Contains(log, "to="+pinned2[strings.Index(pinned2, "@")+1:]) || strings.Contains(log, "level=ERROR") {
		t.Fatalf("want the swap to %s and no error:\n%s", pinned2, log)
	}
	if out := kv("set", "thermostat1/setPoint", "5"); !strings.HasPrefix(out, "OK ") {
		t.Fatalf("kv set: %q", out)
	}
	testutil.WaitFor(t, "the new version to clamp 5 to 16", func() bool { return kv("get", "hvac1/target") == "16" })
}
