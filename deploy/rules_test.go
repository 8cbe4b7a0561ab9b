package deploy_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// The ssrun-rules ConfigMap (rules-configmap.yaml) works as shipped: laid out as
// kubelet mounts it (a timestamped folder, ..data, links), its ssrun.yaml
// loads and its rule runs under those permissions. The Dockerfile's binary
// runs it with `ssrun dev` (the embedded broker standing in for AIO's).
func TestManifestRulesRun(t *testing.T) {
	var data map[string]string
	for _, o := range readObjects(t, configMapFile)["ConfigMap"] {
		if o.Metadata.Name == "ssrun-rules" {
			data = o.Data
		}
	}
	if len(data) == 0 {
		t.Fatal("no ssrun-rules ConfigMap with data")
	}
	dir := testutil.NewConfigMapDir(t, data).Dir

	bin := imageBinary(t)
	p := startBin(t, bin, "dev", dir, "--listen", "127.0.0.1:0")
	stdout, stderr := p.stdout, p.stderr
	addr := waitFor(t, stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	// stdout and stderr are separate pipes: the log lines may come after the
	// "try:" line, so wait for them.
	want := strings.Count(strings.Join(keys(data), " "), ".lua")
	testutil.WaitFor(t, "the ConfigMap's rules to load", func() bool { return strings.Count(stderr.String(), "rule loaded") >= want })
	kv := func(args ...string) string {
		out, _ := exec.Command(bin, append([]string{"kv", "--broker", addr}, args...)...).Output()
		return strings.TrimSpace(string(out))
	}
	if out := kv("set", "thermostat1/setPoint", "40"); !strings.HasPrefix(out, "OK ") {
		t.Fatalf("kv set: %q", out)
	}
	testutil.WaitFor(t, "the thermostat rule to clamp 40 to 28", func() bool { return kv("get", "hvac1/target") == "28" })
	if rules := strings.Count(stderr.String(), "rule loaded"); rules != want {
		t.Errorf("%d rule(s) loaded, want the ConfigMap's %d; stderr:\n%s", rules, want, stderr.String())
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("errors while running the ConfigMap's rules:\n%s", stderr.String())
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
