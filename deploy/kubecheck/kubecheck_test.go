// Package kubecheck_test validates deploy/kubernetes against Kubernetes'
// own API types, offline: every object is decoded strictly into its
// k8s.io/api type, so a misspelt or misplaced field, a value of the wrong
// type or a malformed quantity fails, as it would fail `kubectl apply`.
//
// It is a module of its own so that ssrun's module does not depend on
// k8s.io/api: CI runs it with `cd deploy/kubecheck && go test ./...`
// (.ci/run). deploy's own tests check what the manifest promises.
package kubecheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// kinds are the objects the manifests may hold, by apiVersion and kind.
var kinds = map[string]func() any{
	"v1/ServiceAccount":  func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":       func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment": func() any { return &appsv1.Deployment{} },
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in ../kubernetes (%v)", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range separator.Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Errorf("%s, document %d: %v", file, i+1, err)
				continue
			}
			newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
			if !ok {
				t.Errorf("%s, document %d: %s %s is not a kind this check knows", file, i+1, tm.APIVersion, tm.Kind)
				continue
			}
			obj := newObj()
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s, document %d (%s): %v", file, i+1, tm.Kind, err)
				continue
			}
			if d, ok := obj.(*appsv1.Deployment); ok {
				checkDeployment(t, file, d)
			}
		}
	}
}

// checkDeployment checks what the API server would refuse beyond the
// schema: a selector that does not select the pod template, a probe on a
// port the container does not name.
func checkDeployment(t *testing.T, file string, d *appsv1.Deployment) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: Deployment %s: selector %v does not select its pod template's labels %v (%v)", file, d.Name, d.Spec.Selector, d.Spec.Template.Labels, err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal != "" && !ports[p.HTTPGet.Port.StrVal] {
				t.Errorf("%s: container %s: a probe uses port %q, which it does not name", file, c.Name, p.HTTPGet.Port.StrVal)
			}
		}
	}
}
