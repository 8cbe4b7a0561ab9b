package ocirules_test

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/ocirules"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// opBound bounds one push or pull of a test.
const opBound = 30 * time.Second

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opBound)
	t.Cleanup(cancel)
	return ctx
}

// writeDir makes a folder holding files (name -> content).
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, files)
	return dir
}

// readDir returns the files of a rules folder as the host sees them:
// every entry not hidden, read through its link.
func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func sameFiles(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("files %v, want %v", keys(got), keys(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// logs is a logger whose lines the test reads.
func logs() (*slog.Logger, *testutil.Buffer) {
	var b testutil.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// client is a client of the loopback registry reg (plain HTTP unless reg
// serves TLS), with o's other settings.
func client(t *testing.T, reg *ocitest.Registry, o ocirules.Options) *ocirules.Client {
	t.Helper()
	if reg.CAFile == "" {
		o.PlainHTTP = true
	}
	if o.RegistryConfig == "" { // no credentials of the machine running the tests
		o.RegistryConfig = filepath.Join(t.TempDir(), "no-config.json")
	}
	c, err := ocirules.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ref(t *testing.T, s string) ocirules.Ref {
	t.Helper()
	r, err := ocirules.ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// push packs dir and pushes it to r, signed with key when not nil.
func push(t *testing.T, c *ocirules.Client, dir string, r ocirules.Ref, key ed25519.PrivateKey) ocirules.Pushed {
	t.Helper()
	p, err := ocirules.Pack(dir, ocirules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := c.Push(ctxOf(t), p, r, key)
	if err != nil {
		t.Fatal(err)
	}
	return pushed
}

// pushedV1 starts a registry, a client of it with o, and pushes rulesV1
// to the tag rules/plant:live.
func pushedV1(t *testing.T, o ocirules.Options) (*ocitest.Registry, *ocirules.Client, ocirules.Ref, ocirules.Pushed) {
	t.Helper()
	reg := ocitest.Start(t, ocitest.Options{})
	c := client(t, reg, o)
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:live")
	return reg, c, tag, push(t, c, writeDir(t, rulesV1), tag, nil)
}

// open opens r in cache; the source is closed when the test ends.
func open(t *testing.T, c *ocirules.Client, r ocirules.Ref, cache string) (*ocirules.Source, error) {
	t.Helper()
	s, err := c.Open(ctxOf(t), r, cache)
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

// newKey makes a key pair; it returns the private key and the public
// key's file.
func newKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	key, _, pub := ocitest.KeyPair(t)
	return key, pub
}

func pubKeys(t *testing.T, files ...string) []ed25519.PublicKey {
	t.Helper()
	var ks []ed25519.PublicKey
	for _, f := range files {
		k, err := ocirules.ReadPublicKey(f)
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	return ks
}

func wantErr(t *testing.T, err error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one saying %q", words)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
}

const luaRule = `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) ss.set("out", ev.value) end
`

// rulesV1 and rulesV2 are two versions of a rules folder: v2 changes the
// rule, keeps ssrun.yaml, drops the test file and adds a rule.
var (
	rulesV1 = map[string]string{
		"copy.lua":       luaRule,
		"ssrun.yaml":     "defaults:\n  timeout: 1s\n",
		"copy.test.yaml": "cases: []\n",
		"README.md":      "not packed",
	}
	rulesV2 = map[string]string{
		"copy.lua":   luaRule + "-- v2\n",
		"ssrun.yaml": "defaults:\n  timeout: 1s\n",
		"more.lua":   luaRule + "-- more\n",
	}
)

// packed is what of files a push packs.
func packed(files map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		if k != "README.md" {
			out[k] = v
		}
	}
	return out
}
