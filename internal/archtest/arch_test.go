// Package archtest keeps the package layout of docs/architecture.md: imports
// point down the list, never up; and host/doc.go's word that only
// host/rule.go takes a rule's lock (rulelock_test.go).
package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/ssrun/ssrun/"

// rule is what the packages under one path prefix may depend on.
type rule struct {
	pkg   string   // package path prefix (relative to the module)
	allow []string // allowed project package prefixes
	deny  []string // forbidden third-party module prefixes
}

// thirdParty are the module prefixes of every dependency outside the
// standard library and this module.
var thirdParty = []string{"github.com/", "golang.org/", "google.golang.org/"}

// rules lists, per package prefix, the project packages it may import
// (directly or not); a package follows the rule of its longest prefix.
// Packages not listed here may import anything below cmd.
var rules = []rule{
	{pkg: "abi", allow: []string{"abi"}, deny: thirdParty},
	// abi/abitest, the in-memory abi.Host of the runtimes' tests (and of
	// ssrun check), keeps its keys in package store, the state store's
	// semantics, instead of a copy of its own. It is test support, which
	// neither abi nor a guest SDK imports, so abi and the SDKs stay
	// stdlib-only; abitest takes store's dependencies with it (the protocol
	// packages, internal/glob, internal/filelock, google/btree).
	{pkg: "abi/abitest", allow: []string{"abi", "store", "protocol/resp", "protocol/hlc", "protocol/wire", "internal/glob", "internal/filelock"}},
	{pkg: "protocol", allow: []string{"protocol"}},
	{pkg: "store", allow: []string{"store", "protocol/resp", "protocol/hlc", "protocol/wire", "internal/glob", "internal/filelock"}},
	{pkg: "inproc", allow: []string{"inproc", "protocol", "store", "internal/glob", "internal/filelock"}},
	{pkg: "broker", allow: []string{"broker", "store", "internal/glob", "internal/filelock", "protocol/resp", "protocol/hlc", "protocol/wire", "internal/fsfollow", "internal/safefile", "internal/yamldoc"}},
	{pkg: "runtime/lua", allow: []string{"runtime/lua", "abi"}},
	{pkg: "runtime/wasm", allow: []string{"runtime/wasm", "abi"}},
	{pkg: "runtime/plugin", allow: []string{"runtime/plugin", "abi"}},
	// host may import store and inproc: a dry run stages its writes in a
	// store in process (host/staging).
	{pkg: "host", allow: []string{"host", "abi", "protocol", "store", "inproc", "internal/glob", "internal/filelock", "runtime", "internal/fsfollow", "internal/safefile"}},
	// What sits below the Host lives in packages under host/ (internal
	// where nobody else imports it): each may import the packages the host
	// builds on and those of its neighbours below host, never host itself
	// (the compiler forbids the cycle) nor a runtime.
	{pkg: "host/internal", allow: []string{"host/internal", "host/clock", "host/provenance", "abi", "protocol", "store", "inproc", "internal/glob", "internal/filelock"}},
	// The public packages below the host, whose types admin, testrun and
	// cmd/ssrun use: the clock (stdlib only) and provenance (its types
	// and the journal, over abi's events).
	{pkg: "host/clock", allow: []string{"host/clock"}, deny: thirdParty},
	{pkg: "host/provenance", allow: []string{"host/provenance", "abi"}, deny: thirdParty},
	// rulefile (which files are rules, and reading them), which testrun
	// and cmd/ssrun use as the host does.
	{pkg: "host/rulefile", allow: []string{"host/rulefile", "abi", "internal/safefile"}},
	// staging (a dry run's and a canary's staged writes, whose Write
	// cmd/ssrun prints) stages on the store engine in process, and uses
	// the host's status table and provenance.
	{pkg: "host/staging", allow: []string{"host/staging", "host/internal/status", "host/provenance", "abi", "protocol", "store", "inproc", "internal/glob", "internal/filelock"}},
	// ocirules knows no host nor runtime: it fills a folder that the host
	// loads and follows like any other.
	{pkg: "ocirules", allow: []string{"ocirules", "internal/safefile", "internal/filelock"}},
	{pkg: "admin", allow: []string{"admin", "host", "abi", "protocol", "broker", "store", "inproc", "internal/glob", "internal/filelock", "runtime", "internal/fsfollow", "internal/safefile", "internal/yamldoc"}},
	{pkg: "testrun", allow: []string{"testrun", "host", "abi", "protocol", "store", "inproc", "internal/glob", "internal/filelock", "runtime", "internal/fsfollow", "internal/safefile", "internal/yamldoc"}},
}

// testSupport are the project packages a package of test helpers (one whose
// name ends in "test", such as broker/brokertest) may import besides those
// its folder allows, with what their own rules allow them: only tests
// import such a package.
var testSupport = []string{"internal/testutil", "internal/ruletest", "abi/abitest", "inproc/inproctest"}

// ruleFor returns the rule of the package rel: the one of its longest
// prefix.
func ruleFor(rel string) (rule, bool) {
	var best rule
	found := false
	for _, r := range rules {
		if (rel == r.pkg || strings.HasPrefix(rel, r.pkg+"/")) && (!found || len(r.pkg) > len(best.pkg)) {
			best, found = r, true
		}
	}
	return best, found
}

// allows reports whether the project package d is under one of prefixes.
func allows(prefixes []string, d string) bool {
	for _, a := range prefixes {
		if d == a || strings.HasPrefix(d, a+"/") {
			return true
		}
	}
	return false
}

// supportAllows reports whether a package of test helpers may depend on
// the project package d: one of testSupport, or one a rule of theirs allows.
func supportAllows(d string) bool {
	for _, s := range testSupport {
		if d == s {
			return true
		}
		if r, ok := ruleFor(s); ok && allows(r.allow, d) {
			return true
		}
	}
	return false
}

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
		r, ok := ruleFor(rel)
		if !ok {
			continue
		}
		// abi/guest/* are guest SDKs built for wasip1: same rule as abi.
		checked++
		for _, d := range p.Deps {
			if strings.HasPrefix(d, mod) {
				drel := strings.TrimPrefix(d, mod)
				if !allows(r.allow, drel) && !(strings.HasSuffix(rel, "test") && supportAllows(drel)) {
					t.Errorf("%s imports %s: not allowed by the layout (docs/architecture.md)", rel, drel)
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
	if checked < 4 {
		t.Fatalf("checked only %d packages: go list output not as expected", checked)
	}
}
