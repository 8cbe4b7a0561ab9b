package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

// ociArgs are the registry flags of a test's commands: plain HTTP to the
// loopback registry, and no credentials of the machine running the tests.
func ociArgs(t *testing.T) []string {
	return []string{"--insecure-registry", "--registry-config", filepath.Join(t.TempDir(), "no-docker-config.json")}
}

// pushDir runs `ssrun push dir ref` in process and returns the pinned
// reference it prints.
func pushDir(t *testing.T, dir, ref string, extra ...string) string {
	t.Helper()
	r := runCLI(t, "", append([]string{"push", dir, ref}, append(ociArgs(t), extra...)...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "oci://"+ref+"@sha256:") {
		t.Fatalf("push %s %s: %+v", dir, ref, r)
	}
	return strings.TrimSpace(r.stdout)
}

// canaryRules is a rules folder: scale.lua (in*factor to out, with a
// comment tag so that versions that behave alike differ) and an ssrun.yaml
// that canaries it on 2 events.
func canaryRules(t *testing.T, factor int, tag string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"scale.lua":  scaleRule(factor) + "-- " + tag + "\n",
		"ssrun.yaml": "rules:\n  scale.lua:\n    canary: {events: 2}\n",
	} {
		testutil.WriteFiles(t, dir, map[string]string{name: content})
	}
	return dir
}

// setAndWait sets in to v and waits until out is want: an event the rules
// must handle, whichever version runs.
func setAndWait(t *testing.T, addr string, v, want int) {
	t.Helper()
	if r := runCLI(t, "", "kv", "--broker", addr, "set", "in", fmt.Sprint(v)); r.code != 0 {
		t.Fatalf("kv set: %+v", r)
	}
	waitKV(t, addr, "out", fmt.Sprint(want))
}

// `ssrun run oci://REF` follows a tag: when the tag moves to a new version
// of a rule that has a canary, the new version runs in shadow and goes
// live after its window, every event handled meanwhile; a version that
// writes differently is refused and the live one stays. Stopped, and
// started again with the registry down (a closed loopback port), it runs
// the last version it pulled, from its cache.
func TestRunOCIFollowsTheTagWithTheCanary(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	addr := brokertest.Start(t).Addr()
	ref := reg.Host + "/rules/scale:live"
	pushDir(t, canaryRules(t, 2, "v1"), ref)
	cache := t.TempDir()
	args := append([]string{"run", "oci://" + ref, "--broker", addr, "--pull-interval", "20ms", "--oci-cache", cache}, ociArgs(t)...)
	out, errw, stop := start(t, args...)
	waitOutput(t, out, regexp.MustCompile(`ssrun run: 1 rule\(s\) from `))
	setAndWait(t, addr, 1, 2)

	v2 := pushDir(t, canaryRules(t, 2, "v2: same writes"), ref)
	i := 1
	testutil.WaitFor(t, "the canary of v2 to pass", func() bool {
		i++
		setAndWait(t, addr, i, 2*i)
		return strings.Contains(errw.String(), `msg="canary passed: the new version is live" rule=scale.lua`)
	})
	for _, want := range []string{"canary: new version runs in shadow", `rules artifact changed`, "to=" + strings.TrimPrefix(v2, "oci://"+ref+"@")} {
		if !strings.Contains(errw.String(), want) {
			t.Fatalf("log does not say %q:\n%s", want, errw)
		}
	}

	pushDir(t, canaryRules(t, 3, "v3: other writes"), ref)
	waitOutput(t, errw, regexp.MustCompile(`canary: new version runs in shadow.*\n(?s:.*)canary: new version runs in shadow`))
	i++
	setAndWait(t, addr, i, 2*i) // the live version answers; the shadow's 3*i is refused
	waitOutput(t, errw, regexp.MustCompile(`canary refused`))
	i++
	setAndWait(t, addr, i, 2*i)
	if code := stop(); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, errw)
	}

	reg.Close()
	out, errw, stop = start(t, args...)
	waitOutput(t, out, regexp.MustCompile(`ssrun run: 1 rule\(s\) from `))
	if !strings.Contains(errw.String(), "running the version in the cache") {
		t.Fatalf("no warning that the cache runs:\n%s", errw)
	}
	setAndWait(t, addr, 100, 300) // v3: the last version pulled (the canary judges reloads, not a start)
	stop()
}

// With --verify-key, run, check and test load an artifact signed with
// that key and refuse one signed with another, or unsigned, before
// loading anything (exit status 1, the reason named).
func TestOCIVerifyKey(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	addr := brokertest.Start(t).Addr()
	_, key, pub := ocitest.KeyPair(t)
	_, otherKey, _ := ocitest.KeyPair(t)
	// Three versions: a signature belongs to a digest, whatever tag names it.
	signed := pushDir(t, canaryRules(t, 2, "signed"), reg.Host+"/rules/scale:signed", "--sign-key", key)
	byOther := pushDir(t, canaryRules(t, 2, "by another key"), reg.Host+"/rules/scale:other", "--sign-key", otherKey)
	unsigned := pushDir(t, canaryRules(t, 2, "unsigned"), reg.Host+"/rules/scale:unsigned")
	verify := append(ociArgs(t), "--verify-key", pub)
	if r := runCLI(t, "", append([]string{"check", signed}, verify...)...); r.code != 0 || !strings.Contains(r.stdout, "ok ") {
		t.Fatalf("check of the signed artifact: %+v", r)
	}
	for _, tc := range []struct{ ref, why string }{
		{byOther, "not made by a trusted key"},
		{unsigned, "it has no signature"},
	} {
		for _, cmd := range [][]string{
			{"run", tc.ref, "--broker", addr, "--oci-cache", t.TempDir()},
			{"check", tc.ref},
		} {
			r := runCLI(t, "", append(cmd, verify...)...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.why) || strings.Contains(r.stdout, "ok ") {
				t.Errorf("%s %s: %+v, want exit 1 saying %q", cmd[0], tc.ref, r, tc.why)
			}
		}
	}
}

// ssrun test runs the test files of an artifact, and ssrun push says what
// it packed and skipped.
func TestOCITestAndPushOutput(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	r := runCLI(t, "", append([]string{"push", "../../examples/thermostat", reg.Host + "/examples/thermostat:v1"}, ociArgs(t)...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "pushed 2 file(s)") || !strings.Contains(r.stderr, "thermostat.lua, thermostat.test.yaml") ||
		!strings.Contains(r.stderr, "not pushed (not rules, ssrun.yaml or tests): README.md") {
		t.Fatalf("push: %+v", r)
	}
	tr := runCLI(t, "", append([]string{"test", strings.TrimSpace(r.stdout)}, ociArgs(t)...)...)
	if tr.code != 0 || !strings.Contains(tr.stdout, "ok") {
		t.Fatalf("test of the pushed artifact: %+v", tr)
	}
	if r := runCLI(t, "", append([]string{"push", "../../examples/thermostat", reg.Host + "/examples/thermostat"}, ociArgs(t)...)...); r.code != 2 || !strings.Contains(r.stderr, "name a tag") {
		t.Fatalf("push without a tag: %+v", r)
	}
}

// `ssrun dev oci://REF` runs an artifact on its embedded broker.
func TestDevOCI(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	ref := reg.Host + "/rules/scale:dev"
	pushDir(t, canaryRules(t, 5, "dev"), ref)
	out, errw, stop := start(t, append([]string{"dev", "oci://" + ref, "--listen", "127.0.0.1:0", "--admin", "off", "--oci-cache", t.TempDir()}, ociArgs(t)...)...)
	addr := waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	setAndWait(t, addr, 3, 15)
	if code := stop(); code != 0 {
		t.Fatalf("dev exited %d:\n%s", code, errw)
	}
}
