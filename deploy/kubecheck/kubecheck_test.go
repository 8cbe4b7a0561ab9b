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
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// kinds are the objects the manifests may hold, by apiVersion and kind.
var kinds = map[string]func() any{
	"v1/ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	// Azure IoT Operations' custom resource: no Go type of Kubernetes has
	// it, so brokerAuthorization below mirrors its schema.
	"mqttbroker.iotoperations.azure.com/v1/BrokerAuthorization": func() any { return &brokerAuthorization{} },
}

// brokerAuthorization mirrors AIO's BrokerAuthorization (API version
// mqttbroker.iotoperations.azure.com/v1): decoded strictly, a misspelt
// or misplaced field fails; check adds what its schema's enums and
// required fields say.
type brokerAuthorization struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		AuthorizationPolicies struct {
			Cache string `json:"cache,omitempty"`
			Rules []struct {
				Principals struct {
					Attributes []map[string]string `json:"attributes,omitempty"`
					ClientIDs  []string            `json:"clientIds,omitempty"`
					Usernames  []string            `json:"usernames,omitempty"`
				} `json:"principals"`
				BrokerResources []struct {
					Method    string   `json:"method"`
					ClientIDs []string `json:"clientIds,omitempty"`
					Topics    []string `json:"topics,omitempty"`
				} `json:"brokerResources"`
				StateStoreResources []struct {
					Method  string   `json:"method"`
					KeyType string   `json:"keyType"`
					Keys    []string `json:"keys"`
				} `json:"stateStoreResources,omitempty"`
			} `json:"rules"`
		} `json:"authorizationPolicies"`
	} `json:"spec"`
}

// check refuses what AIO's schema refuses beyond the field names: values
// outside its enums, a rule without principals or resources, Connect with
// topics, Publish or Subscribe without.
func (b *brokerAuthorization) check() []string {
	var errs []string
	p := b.Spec.AuthorizationPolicies
	if p.Cache != "" && p.Cache != "Enabled" && p.Cache != "Disabled" {
		errs = append(errs, fmt.Sprintf("cache %q: want Enabled or Disabled", p.Cache))
	}
	if len(p.Rules) == 0 {
		errs = append(errs, "no rules")
	}
	for i, r := range p.Rules {
		pr := r.Principals
		if len(pr.Attributes)+len(pr.ClientIDs)+len(pr.Usernames) == 0 {
			errs = append(errs, fmt.Sprintf("rules[%d]: no principals", i))
		}
		if len(r.BrokerResources) == 0 {
			errs = append(errs, fmt.Sprintf("rules[%d]: no brokerResources", i))
		}
		for j, br := range r.BrokerResources {
			switch {
			case br.Method == "Connect" && len(br.Topics) > 0:
				errs = append(errs, fmt.Sprintf("rules[%d].brokerResources[%d]: Connect takes no topics", i, j))
			case (br.Method == "Publish" || br.Method == "Subscribe") && (len(br.Topics) == 0 || len(br.ClientIDs) > 0):
				errs = append(errs, fmt.Sprintf("rules[%d].brokerResources[%d]: %s takes topics and no clientIds", i, j, br.Method))
			case br.Method != "Connect" && br.Method != "Publish" && br.Method != "Subscribe":
				errs = append(errs, fmt.Sprintf("rules[%d].brokerResources[%d]: method %q: want Connect, Publish or Subscribe", i, j, br.Method))
			}
		}
		for j, ss := range r.StateStoreResources {
			if ss.Method != "Read" && ss.Method != "Write" && ss.Method != "ReadWrite" {
				errs = append(errs, fmt.Sprintf("rules[%d].stateStoreResources[%d]: method %q: want Read, Write or ReadWrite", i, j, ss.Method))
			}
			if ss.KeyType != "Pattern" && ss.KeyType != "String" && ss.KeyType != "Binary" {
				errs = append(errs, fmt.Sprintf("rules[%d].stateStoreResources[%d]: keyType %q: want Pattern, String or Binary", i, j, ss.KeyType))
			}
			if len(ss.Keys) == 0 {
				errs = append(errs, fmt.Sprintf("rules[%d].stateStoreResources[%d]: no keys", i, j))
			}
		}
	}
	return errs
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in ../kubernetes (%v)", err)
	}
	var deployments []*appsv1.Deployment
	var pdbs []*policyv1.PodDisruptionBudget
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
			switch o := obj.(type) {
			case *appsv1.Deployment:
				checkDeployment(t, file, o)
				deployments = append(deployments, o)
			case *policyv1.PodDisruptionBudget:
				pdbs = append(pdbs, o)
			case *brokerAuthorization:
				for _, e := range o.check() {
					t.Errorf("%s: BrokerAuthorization %s: %s", file, o.Name, e)
				}
			}
		}
	}
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		selects := 0
		for _, d := range deployments {
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) && d.Namespace == pdb.Namespace {
				selects++
				if pdb.Spec.MinAvailable == nil || d.Spec.Replicas == nil || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
					t.Errorf("PodDisruptionBudget %s: minAvailable %v of %v replicas of %s: no pod could ever be evicted", pdb.Name, pdb.Spec.MinAvailable, d.Spec.Replicas, d.Name)
				}
			}
		}
		if selects != 1 {
			t.Errorf("PodDisruptionBudget %s: its selector %v selects the pods of %d Deployments, want 1 (%v)", pdb.Name, pdb.Spec.Selector, selects, err)
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
