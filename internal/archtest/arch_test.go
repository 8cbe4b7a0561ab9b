// Package archtest keeps the package layout of architecture.md §2: imports
// point down the list, never up; and host/doc.go's word that only
// host/rule.go takes a rule's lock (rulelock_test.go).
package archtest

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/ssrun/ssrun/"

// allowed lists, per package prefix, the project packages it may import
// (directly or not). Packages not listed here may import anything below cmd.
var rules = []struct {
	pkg   string   // package path prefix (relative to the module)
	allow []string // allowed project package prefixes
	deny  []string // forbidden third-party module prefixes
}{
	{pkg: "abi", allow: []string{"abi"}, deny: []string{"github.com/", "golang.org/", "google.golang.org/"}},
	{pkg: "protocol", allow: []string{"protocol"}},
	{pkg: "store", allow: []string{"store", "protocol/resp", "protocol/hlc", "protocol/wire"}},
	{pkg: "inproc", allow: []string{"inproc", "protocol", "store"}},
	{pkg: "broker", allow: []string{"broker", "store", "protocol/resp", "protocol/hlc", "protocol/wire", "internal/fsfollow", "internal/safefile"}},
	{pkg: "runtime/lua", allow: []string{"runtime/lua", "abi"}},
	{pkg: "runtime/wasm", allow: []string{"runtime/wasm", "abi"}},
	{pkg: "runtime/plugin", allow: []string{"runtime/plugin", "abi"}},
	{pkg: "host", allow: []string{"host", "abi", "protocol", "runtime", "internal/fsfollow", "internal/safefile"}},
	{pkg: "testrun", allow: []string{"testrun", "host", "abi", "protocol", "store", "inproc", "runtime", "internal/fsfollow", "internal/safefile"}},
	{pkg: "admin", allow: []string{"admin", "host", "abi", "protocol", "broker", "store", "runtime", "internal/fsfollow", "internal/safefile"}},
}

// testSupport are the project packages a package of test helpers (one whose
// name ends in "test", such as broker/brokertest) may import besides those
// its folder allows: only tests import such a package.
var testSupport = []string{"internal/testutil", "internal/ruletest"}

type pkgInfo struct {
	ImportPath string
	Deps       []string
	Standard   bool
}

func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-json", "github.com/ssrun/ssrun/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, mod)
		for _, r := range rules {
			if rel != r.pkg && !strings.HasPrefix(rel, r.pkg+"/") {
				continue
			}
			// abi/guest/* are guest SDKs built for wasip1: same rule as abi.
			checked++
			for _, d := range p.Deps {
				if strings.HasPrefix(d, mod) {
					drel := strings.TrimPrefix(d, mod)
					ok := false
					for _, a := range r.allow {
						if drel == a || strings.HasPrefix(drel, a+"/") {
							ok = true
						}
					}
					if strings.HasSuffix(rel, "test") && slices.Contains(testSupport, drel) {
						ok = true
					}
					if !ok {
						t.Errorf("%s imports %s: not allowed by the layout (architecture.md §2)", rel, drel)
					}
					continue
				}
				for _, deny := range r.deny {
					if strings.HasPrefix(d, deny) {
						t.Errorf("%s depends on %s: %s must stay stdlib-only", rel, d, r.pkg)
					}
				}
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked only %d packages: go list output not as expected", checked)
	}
}
