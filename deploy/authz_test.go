package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/ocirules"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

const authzFile = "kubernetes/broker-authorization.yaml"

// satUser stands, on ssrun's embedded broker, for the identity AIO's
// broker gives the ssrun service account's tokens (the attribute
// group=ssrun): the embedded broker has passwords, not tokens.
const satUser = "ssrun-sat"

// embeddedACL turns the sample BrokerAuthorization into an ACL file of
// ssrun's embedded broker: its principal's attributes become satUser, and
// its Connect client ids become satUser's ids (the embedded broker's users
// section says the same); a rule for an operator who sets the thermostat
// is added. Everything else is the sample as shipped.
func embeddedACL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(authzFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", authzFile, err)
	}
	policies := doc["spec"].(map[string]any)["authorizationPolicies"].(map[string]any)
	rules := policies["rules"].([]any)
	var ids []any
	for _, r := range rules {
		rule := r.(map[string]any)
		pr := rule["principals"].(map[string]any)
		if _, ok := pr["attributes"]; !ok {
			t.Fatalf("%s: a rule whose principal is not the service account's attribute: %v", authzFile, pr)
		}
		rule["principals"] = map[string]any{"usernames": []any{satUser}}
		for _, br := range rule["brokerResources"].([]any) {
			res := br.(map[string]any)
			if res["method"] == "Connect" {
				ids = append(ids, res["clientIds"].([]any)...)
				delete(res, "clientIds")
			}
		}
	}
	if len(ids) == 0 {
		t.Fatalf("%s: Connect names no client ids", authzFile)
	}
	policies["rules"] = append(rules, map[string]any{
		"principals":          map[string]any{"usernames": []any{"ops"}},
		"brokerResources":     []any{map[string]any{"method": "Connect"}},
		"stateStoreResources": []any{map[string]any{"method": "ReadWrite", "keyType": "Pattern", "keys": []any{"*"}}},
	})
	doc["users"] = map[string]any{satUser: map[string]any{"clientIds": ids}}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// passwords writes a password file for users (each one's password is its
// name reversed) with the binary's `ssrun passwd`, and each password's
// file.
func passwords(t *testing.T, bin string, users ...string) (file string, pw map[string]string) {
	t.Helper()
	dir := t.TempDir()
	pw = map[string]string{}
	var lines []string
	for _, u := range users {
		secret := reverse(u) + "-password"
		cmd := exec.Command(bin, "passwd", u)
		cmd.Stdin = strings.NewReader(secret)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ssrun passwd %s: %v", u, err)
		}
		lines = append(lines, strings.TrimSpace(string(out)))
		pw[u] = filepath.Join(dir, u+".pw")
		if err := os.WriteFile(pw[u], []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file = filepath.Join(dir, "users.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, pw
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// serverFlags are the manifest's flags that only make sense in the pod:
// the admin endpoint listens on every address (a test binds loopback
// only), the paths are the pod's volumes.
var serverFlags = map[string]bool{"admin": true, "admin-token-file": true, "oci-cache": true, "plugin-dir": true, "registry-config": true}

// The deployment as shipped, on loopback, with the Dockerfile's binary: the
// Go thermostat (a 2.8 MB WebAssembly rule: no ConfigMap could hold it) is
// pushed to a registry under the manifest's repository and tag, and two
// `ssrun run` processes with the manifest's arguments (its --group, its
// pull settings, its logs) pull it and connect as ssrun's identity to a
// broker that authorizes with the sample BrokerAuthorization. The rule
// runs on exactly one of them and works under those grants (it reads and
// writes back the set point, writes the target); that identity is refused
// a key outside the grants, a read of a key it may only write, and a
// client id outside ssrun-*.
func TestManifestRunsAGoRuleFromARegistryUnderTheAuthorization(t *testing.T) {
	m := readManifest(t)
	_, rulesArg, flags := m.flags(t)
	ref, err := ocirules.ParseRef(rulesArg)
	if err != nil {
		t.Fatalf("the manifest's rules %q: %v", rulesArg, err)
	}
	bin := imageBinary(t)
	rules := t.TempDir()
	if err := gobuild.WASM(filepath.Join(rules, "thermostat.wasm"), "../examples/thermostat-go"); err != nil {
		t.Fatal(err)
	}
	reg := ocitest.Start(t, ocitest.Options{})
	local := reg.Host + "/" + ref.Repository + ":" + ref.Tag
	noCreds := filepath.Join(t.TempDir(), "no-docker-config.json")
	if out, err := exec.Command(bin, "push", rules, local, "--insecure-registry", "--registry-config", noCreds).CombinedOutput(); err != nil {
		t.Fatalf("ssrun push: %v\n%s", err, out)
	}

	users, pw := passwords(t, bin, satUser, "ops")
	broker := startBin(t, bin, "broker", "--listen", "127.0.0.1:0", "--passwords", users, "--acl", embeddedACL(t))
	addr := waitFor(t, broker.stdout, regexp.MustCompile(`listening on (\S+)\n`))[1]

	var runs []*binProc
	for i := range 2 {
		args := []string{"run", "oci://" + local, "--insecure-registry", "--registry-config", noCreds,
			"--oci-cache", t.TempDir(), "--broker", addr, "--username", satUser, "--password-file", pw[satUser],
			"--client-id", fmt.Sprintf("ssrun-pod-%d", i)}
		for name, value := range flags {
			if !serverFlags[name] {
				args = append(args, "--"+name+"="+value)
			}
		}
		r := startBin(t, bin, args...)
		waitFor(t, r.stdout, regexp.MustCompile(`ssrun run: 1 rule\(s\) from `))
		runs = append(runs, r)
	}
	kv := func(user string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"kv", "--broker", addr, "--username", user, "--password-file", pw[user]}, args...)...)
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return strings.TrimSpace(string(out)), code
	}
	loaded := regexp.MustCompile(`"msg":"rule loaded","rule":"thermostat.wasm"`)
	testutil.WaitFor(t, "one of the two to run the rule", func() bool {
		return len(loaded.FindAllString(runs[0].stderr.String()+runs[1].stderr.String(), -1)) == 1
	})
	if _, code := kv("ops", "set", "thermostat1/setPoint", "20"); code != 0 {
		t.Fatalf("ops: kv set exit %d", code)
	}
	testutil.WaitFor(t, "hvac1/target 20", func() bool { out, _ := kv("ops", "get", "hvac1/target"); return out == "20" })
	if _, code := kv("ops", "set", "thermostat1/setPoint", "30"); code != 0 {
		t.Fatalf("ops: kv set exit %d", code)
	}
	testutil.WaitFor(t, "hvac1/target 28 and the set point written back", func() bool {
		target, _ := kv("ops", "get", "hvac1/target")
		sp, _ := kv("ops", "get", "thermostat1/setPoint")
		return target == "28" && sp == "28"
	})
	for _, tc := range []struct {
		what string
		args []string
	}{
		{"a key outside the grants", []string{"--client-id", "ssrun-x", "set", "other/key", "v"}},
		{"a read of a key it may only write", []string{"--client-id", "ssrun-x", "get", "hvac1/target"}},
		{"a client id outside ssrun-*", []string{"--client-id", "intruder", "set", "thermostat1/error", "v"}},
	} {
		if out, code := kv(satUser, tc.args...); code != 4 {
			t.Errorf("ssrun's identity, %s: exit %d (%q), want 4 (not authorized)", tc.what, code, out)
		}
	}
	for i, r := range runs {
		if log := r.stderr.String(); strings.Contains(log, "not authorized") || strings.Contains(log, `"level":"ERROR"`) {
			t.Errorf("run %d: errors under the sample authorization:\n%s", i, log)
		}
	}
}

// binProc is a process of the binary under test, its output collected.
type binProc struct {
	stdout, stderr *testutil.Buffer
}

// startBin starts bin with args; it is killed, and waited for, when the
// test ends.
func startBin(t *testing.T, bin string, args ...string) *binProc {
	t.Helper()
	p := &binProc{stdout: &testutil.Buffer{}, stderr: &testutil.Buffer{}}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return p
}

// waitFor waits until re matches what w holds and returns the match.
func waitFor(t *testing.T, w *testutil.Buffer, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	testutil.WaitFor(t, re.String(), func() bool { m = re.FindStringSubmatch(w.String()); return m != nil })
	return m
}
