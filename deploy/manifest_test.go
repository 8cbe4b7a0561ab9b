package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ssrun/ssrun/ocirules"
)

// The subset of the Kubernetes objects the manifest's promises are about.

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	AutomountToken *bool             `yaml:"automountServiceAccountToken"` // ServiceAccount
	Data           map[string]string `yaml:"data"`                         // ConfigMap
	Spec           struct {          // Deployment, PodDisruptionBudget
		Replicas *int `yaml:"replicas"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable *int `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		MinAvailable *int `yaml:"minAvailable"`
		Template     struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	ServiceAccountName string          `yaml:"serviceAccountName"`
	AutomountToken     *bool           `yaml:"automountServiceAccountToken"`
	GracePeriod        *int            `yaml:"terminationGracePeriodSeconds"`
	SecurityContext    securityContext `yaml:"securityContext"`
	Containers         []container     `yaml:"containers"`
	Volumes            []volume        `yaml:"volumes"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	Capabilities             struct {
		Add  []string `yaml:"add"`
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
	SeccompProfile struct {
		Type string `yaml:"type"`
	} `yaml:"seccompProfile"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe   *probe          `yaml:"livenessProbe"`
	ReadinessProbe  *probe          `yaml:"readinessProbe"`
	SecurityContext securityContext `yaml:"securityContext"`
	Resources       struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"` // a number or a port name
	} `yaml:"httpGet"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name     string `yaml:"name"`
		Optional bool   `yaml:"optional"`
	} `yaml:"configMap"`
	EmptyDir *struct{} `yaml:"emptyDir"`
	Secret   *struct {
		SecretName string `yaml:"secretName"`
		Optional   bool   `yaml:"optional"`
		Items      []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"secret"`
	Projected *struct {
		Sources []struct {
			ServiceAccountToken *struct {
				Path     string `yaml:"path"`
				Audience string `yaml:"audience"`
			} `yaml:"serviceAccountToken"`
		} `yaml:"sources"`
	} `yaml:"projected"`
}

// The manifests: the Deployment and what goes with it, and the ConfigMap
// way of shipping rules.
const (
	manifestFile  = "kubernetes/ssrun.yaml"
	configMapFile = "kubernetes/rules-configmap.yaml"
)

// manifest is the parsed manifest: its objects by kind, and the ssrun
// container of the Deployment.
type manifest struct {
	byKind map[string][]object
	pod    podSpec
	c      container
}

// readObjects parses the objects of a manifest file, by kind.
func readObjects(t *testing.T, file string) map[string][]object {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]object{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return byKind
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if o.Kind == "" || o.APIVersion == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: an object without kind, apiVersion or name: %+v", file, o)
		}
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	m := manifest{byKind: readObjects(t, manifestFile)}
	deps := m.byKind["Deployment"]
	if len(deps) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", manifestFile, len(deps))
	}
	m.pod = deps[0].Spec.Template.Spec
	if len(m.pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want ssrun alone", manifestFile, len(m.pod.Containers))
	}
	m.c = m.pod.Containers[0]
	return m
}

// env returns the value of the container's variable name.
func (m manifest) env(name string) (string, bool) {
	for _, e := range m.c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// mountOf returns where the volume matching is mounted, failing the test
// if no volume matches or it is not mounted.
func (m manifest) mountOf(t *testing.T, what string, match func(volume) bool) string {
	t.Helper()
	for _, v := range m.pod.Volumes {
		if !match(v) {
			continue
		}
		for _, vm := range m.c.VolumeMounts {
			if vm.Name == v.Name {
				if vm.SubPath != "" {
					t.Errorf("%s mounted with subPath %q: kubelet does not update it", what, vm.SubPath)
				}
				return vm.MountPath
			}
		}
		t.Fatalf("%s: volume %s is not mounted", what, v.Name)
	}
	t.Fatalf("no volume for %s", what)
	return ""
}

// flags parses the container's args, after the subcommand and the rules
// folder, as flag name -> value ("--name=value" or "--name value").
func (m manifest) flags(t *testing.T) (sub, dir string, flags map[string]string) {
	t.Helper()
	if len(m.c.Command) != 0 {
		t.Errorf("command %q overrides the image's entrypoint", m.c.Command)
	}
	args := m.c.Args
	if len(args) < 2 {
		t.Fatalf("args %q: want run DIR [flags]", args)
	}
	flags = map[string]string{}
	for i := 2; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("args %q: %q is not a flag", args, a)
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			i++
			value = args[i]
		}
		flags[name] = value
	}
	return args[0], args[1], flags
}

// pendingFlags are flags the manifest uses that other branches of issue 11
// add to `ssrun run`. The test tolerates their absence from `run --help`
// and fails once one is there, so that it is removed from this list and
// checked like any other flag.
var pendingFlags = map[string]string{}

// The container runs `ssrun run` on an OCI reference (or on the rules
// ConfigMap's folder, mounted optional for those who apply
// rules-configmap.yaml), every flag it passes is a flag of `ssrun run` (as
// the Dockerfile's binary prints them), and every AIO_* variable it sets is
// one ssrun reads.
func TestManifestArgsAreRunFlags(t *testing.T) {
	m := readManifest(t)
	sub, dir, flags := m.flags(t)
	if sub != "run" {
		t.Errorf("subcommand %q, want run", sub)
	}
	var cm *volume
	rules := m.mountOf(t, "the rules ConfigMap", func(v volume) bool {
		if v.ConfigMap != nil && v.ConfigMap.Name == "ssrun-rules" {
			cm = &v
			return true
		}
		return false
	})
	if !cm.ConfigMap.Optional {
		t.Errorf("the rules ConfigMap is not optional: the pods wait for it when the rules come from a registry")
	}
	if _, err := ocirules.ParseRef(dir); err != nil && dir != rules {
		t.Errorf("rules %q: neither an oci:// reference (%v) nor the ssrun-rules mount %q", dir, err, rules)
	}
	cms := readObjects(t, configMapFile)["ConfigMap"]
	if len(cms) != 1 || cms[0].Metadata.Name != "ssrun-rules" || cms[0].Metadata.Namespace != "azure-iot-operations" {
		t.Errorf("%s: want the ssrun-rules ConfigMap of azure-iot-operations, got %+v", configMapFile, cms)
	}
	help, err := exec.Command(imageBinary(t), "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("ssrun run --help: %v\n%s", err, help)
	}
	has := map[string]bool{}
	for _, f := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		has[f[1]] = true
	}
	for name := range flags {
		why, pending := pendingFlags[name]
		switch {
		case has[name] && pending:
			t.Errorf("--%s is a flag of ssrun run now: remove it from pendingFlags", name)
		case !has[name] && pending:
			t.Logf("--%s: not yet a flag of ssrun run (%s)", name, why)
		case !has[name]:
			t.Errorf("--%s is not a flag of ssrun run; run --help:\n%s", name, help)
		}
	}
	for _, e := range m.c.Env {
		if strings.HasPrefix(e.Name, "AIO_") && !regexp.MustCompile(`\b`+e.Name+`\b`).Match(help) {
			t.Errorf("%s: ssrun run does not read it (not in run --help)", e.Name)
		}
	}
}

// The pod runs as a non-root user on a read-only root file system, without
// privileges, capabilities or a Kubernetes API token, and only the work
// volume is writable.
func TestManifestSecurity(t *testing.T) {
	m := readManifest(t)
	pod, c := m.pod.SecurityContext, m.c.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(pod.RunAsNonRoot) && !isTrue(c.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	for _, u := range []*int64{pod.RunAsUser, c.RunAsUser} {
		if u != nil && *u == 0 {
			t.Error("runAsUser 0")
		}
	}
	if !isTrue(c.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" || len(c.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and nothing added", c.Capabilities)
	}
	if pod.SeccompProfile.Type != "RuntimeDefault" && c.SeccompProfile.Type != "RuntimeDefault" {
		t.Error("seccompProfile is not RuntimeDefault")
	}
	if m.pod.AutomountToken == nil || *m.pod.AutomountToken {
		t.Error("the pod mounts a Kubernetes API token (automountServiceAccountToken is not false)")
	}
	sas := m.byKind["ServiceAccount"]
	if len(sas) != 1 || sas[0].Metadata.Name != m.pod.ServiceAccountName {
		t.Errorf("serviceAccountName %q: want the manifest's ServiceAccount", m.pod.ServiceAccountName)
	}
	emptyDirs := map[string]bool{}
	for _, v := range m.pod.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	for _, vm := range m.c.VolumeMounts {
		if !vm.ReadOnly && !emptyDirs[vm.Name] {
			t.Errorf("volume %s at %s is writable", vm.Name, vm.MountPath)
		}
	}
	if _, ok := m.c.Resources.Requests["memory"]; !ok {
		t.Error("no memory request")
	}
	if _, ok := m.c.Resources.Limits["memory"]; !ok {
		t.Error("no memory limit")
	}
}

// The connection is the one AIO's broker expects of an application: TLS
// verified with AIO's trust bundle, K8S-SAT with a projected token of
// audience aio-internal, each file where the variable says.
func TestManifestBrokerConnection(t *testing.T) {
	m := readManifest(t)
	sat := ""
	satDir := m.mountOf(t, "the service account token", func(v volume) bool {
		if v.Projected == nil {
			return false
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == "aio-internal" {
				sat = s.ServiceAccountToken.Path
				return true
			}
		}
		return false
	})
	if got, _ := m.env("AIO_SAT_FILE"); got != path.Join(satDir, sat) {
		t.Errorf("AIO_SAT_FILE=%q, want the projected token %q", got, path.Join(satDir, sat))
	}
	ca := m.mountOf(t, "AIO's trust bundle", func(v volume) bool {
		return v.ConfigMap != nil && v.ConfigMap.Name == "azure-iot-operations-aio-ca-trust-bundle"
	})
	if got, _ := m.env("AIO_TLS_CA_FILE"); got != path.Join(ca, "ca.crt") {
		t.Errorf("AIO_TLS_CA_FILE=%q, want %q", got, path.Join(ca, "ca.crt"))
	}
	for name, want := range map[string]string{"AIO_MQTT_USE_TLS": "true", "AIO_BROKER_HOSTNAME": "aio-broker", "AIO_BROKER_TCP_PORT": "18883"} {
		if got, _ := m.env(name); got != want {
			t.Errorf("%s=%q, want %q", name, got, want)
		}
	}
	var all []object
	for _, objs := range m.byKind {
		all = append(all, objs...)
	}
	for _, o := range all {
		if o.Metadata.Namespace != "azure-iot-operations" {
			t.Errorf("%s %s in namespace %q: the trust bundle is in azure-iot-operations", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}
}

// --registry-config is the pull secret's .dockerconfigjson, mounted from
// an optional Secret (an anonymous registry needs none).
func TestManifestRegistryCredentials(t *testing.T) {
	m := readManifest(t)
	_, _, flags := m.flags(t)
	item := ""
	dir := m.mountOf(t, "the registry's pull secret", func(v volume) bool {
		if v.Secret == nil || v.Secret.SecretName != "ssrun-registry" {
			return false
		}
		if !v.Secret.Optional {
			t.Errorf("the pull secret is not optional: a registry read anonymously needs none")
		}
		for _, it := range v.Secret.Items {
			if it.Key == ".dockerconfigjson" {
				item = it.Path
			}
		}
		return true
	})
	if want := path.Join(dir, item); item == "" || flags["registry-config"] != want {
		t.Errorf("--registry-config=%q, want the pull secret's .dockerconfigjson at %q", flags["registry-config"], want)
	}
}

// maxPluginDir is plugin.maxExecDir: the longest --plugin-dir whose unix
// socket paths fit (longer ones put the sockets in /tmp, read-only here).
const maxPluginDir = 44

// The plugin directory, the WebAssembly cache and the pulled rules are on
// the emptyDir, the one writable volume; the probes ask the admin endpoint
// --admin opens, on an address the kubelet reaches; the grace period
// covers --shutdown-timeout; two replicas in one --group, a rollout that
// adds a pod before it removes one, and a PodDisruptionBudget that keeps
// one of them through evictions.
func TestManifestRuntime(t *testing.T) {
	m := readManifest(t)
	_, _, flags := m.flags(t)
	work := m.mountOf(t, "the work volume", func(v volume) bool { return v.EmptyDir != nil })
	under := func(what, p string) {
		if !strings.HasPrefix(p, work+"/") {
			t.Errorf("%s %q is not under the writable emptyDir %s", what, p, work)
		}
	}
	under("--plugin-dir", flags["plugin-dir"])
	if len(flags["plugin-dir"]) > maxPluginDir {
		t.Errorf("--plugin-dir %q longer than %d bytes: the plugins' sockets would go to /tmp", flags["plugin-dir"], maxPluginDir)
	}
	cache, _ := m.env("XDG_CACHE_HOME")
	under("XDG_CACHE_HOME", cache)
	under("--oci-cache", flags["oci-cache"])

	host, port, err := net.SplitHostPort(flags["admin"])
	if err != nil || (host != "0.0.0.0" && host != "::" && host != "") {
		t.Fatalf("--admin %q: want 0.0.0.0:PORT (the kubelet probes the pod's address)", flags["admin"])
	}
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{{"liveness", "/healthz", m.c.LivenessProbe}, {"readiness", "/readyz", m.c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe path %q, want %q", p.name, p.probe.HTTPGet.Path, p.path)
		}
		got := p.probe.HTTPGet.Port.Value
		for _, cp := range m.c.Ports {
			if cp.Name == got {
				got = strconv.Itoa(cp.ContainerPort)
			}
		}
		if got != port {
			t.Errorf("%s probe port %q (%s), want --admin's %s", p.name, p.probe.HTTPGet.Port.Value, got, port)
		}
	}

	shutdown, err := time.ParseDuration(flags["shutdown-timeout"])
	grace := -1 // absent: Kubernetes' default, 30 s, is not relied on
	if m.pod.GracePeriod != nil {
		grace = *m.pod.GracePeriod
	}
	if err != nil || time.Duration(grace)*time.Second <= shutdown {
		t.Errorf("terminationGracePeriodSeconds %d must exceed --shutdown-timeout %q", grace, flags["shutdown-timeout"])
	}
	d := m.byKind["Deployment"][0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 || flags["group"] == "" {
		t.Errorf("replicas %v, --group %q: want 2 replicas in a group (one alone would be down while it restarts; two without a group would both react to every change)", d.Spec.Replicas, flags["group"])
	}
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != "RollingUpdate" || ru.MaxUnavailable == nil || *ru.MaxUnavailable != 0 {
		t.Errorf("strategy %+v: want RollingUpdate with maxUnavailable 0 (the group hands rules over)", d.Spec.Strategy)
	}
	pdbs := m.byKind["PodDisruptionBudget"]
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	pdb := pdbs[0].Spec
	if pdb.MinAvailable == nil || *pdb.MinAvailable < 1 || *pdb.MinAvailable >= *d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %v: want at least 1 and fewer than the replicas (else no node can drain)", pdb.MinAvailable)
	}
	if len(pdb.Selector.MatchLabels) == 0 {
		t.Error("PodDisruptionBudget selects no pods")
	}
	for k, v := range pdb.Selector.MatchLabels {
		if d.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("PodDisruptionBudget selects %s=%s, which the pods do not carry (%v)", k, v, d.Spec.Template.Metadata.Labels)
		}
	}
}

// The admin endpoint listens off loopback, so it has a token (ssrun
// refuses to start without one): --admin-token-file is the token key of a
// Secret volume, which the manifest does not hold (its value would be
// every installation's).
func TestManifestAdminToken(t *testing.T) {
	m := readManifest(t)
	_, _, flags := m.flags(t)
	file, ok := flags["admin-token-file"]
	if !ok {
		t.Fatalf("--admin %q without --admin-token-file: ssrun refuses to start off loopback without a token", flags["admin"])
	}
	item := ""
	dir := m.mountOf(t, "the admin token's Secret", func(v volume) bool {
		if v.Secret == nil || v.Secret.SecretName != "ssrun-admin-token" {
			return false
		}
		for _, it := range v.Secret.Items {
			if it.Key == "token" {
				item = it.Path
			}
		}
		return true
	})
	if want := path.Join(dir, item); item == "" || file != want {
		t.Errorf("--admin-token-file=%q, want the Secret's token at %q", file, want)
	}
	for _, o := range m.byKind["Secret"] {
		t.Errorf("the manifest holds Secret %s: a shipped token would be known to everyone", o.Metadata.Name)
	}
}
