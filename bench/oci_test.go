package bench

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/ocirules"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

// ociFixture is a Go WebAssembly rule (the thermostat, about 2.8 MB) in a
// folder on disk and pushed, signed, to a registry on loopback; the client
// pulls it with --verify-key.
type ociFixture struct {
	e      *env
	disk   string // the rule file on disk
	client *ocirules.Client
	ref    ocirules.Ref
}

func newOCIFixture(tb testing.TB) *ociFixture {
	tb.Helper()
	e := newEnv(tb, host.RuleConfig{})
	path, err := testDir.WASM("thermostat.wasm", "../examples/thermostat-go")
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	f := &ociFixture{e: e, disk: filepath.Join(dir, "thermostat.wasm")}
	if err := os.WriteFile(f.disk, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	reg := ocitest.Start(tb, ocitest.Options{})
	key, _, _ := ocitest.KeyPair(tb)
	o := ocirules.Options{PlainHTTP: true, RegistryConfig: filepath.Join(tb.TempDir(), "none.json"), VerifyKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}
	if f.client, err = ocirules.New(o); err != nil {
		tb.Fatal(err)
	}
	p, err := ocirules.Pack(dir, ocirules.Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.ref, err = ocirules.ParseRef("oci://" + reg.Host + "/rules/thermostat:v1")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.client.Push(ctx, p, f.ref, key); err != nil {
		tb.Fatal(err)
	}
	return f
}

// loadDisk loads the rule from disk into the host and removes it.
func (f *ociFixture) loadDisk(tb testing.TB) time.Duration {
	t0 := time.Now()
	f.load(tb, f.disk)
	return time.Since(t0)
}

// loadOCI pulls the artifact into an empty cache (manifest, signature
// verified, 2.8 MB blob verified against its digest, the folder swapped
// in), loads the rule from it and removes it.
func (f *ociFixture) loadOCI(tb testing.TB) time.Duration {
	cache := tb.TempDir()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := f.client.Open(ctx, f.ref, cache)
	if err != nil {
		tb.Fatal(err)
	}
	f.load(tb, filepath.Join(s.Dir(), "thermostat.wasm"))
	d := time.Since(t0)
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.RemoveAll(cache); err != nil {
		tb.Fatal(err)
	}
	return d
}

func (f *ociFixture) load(tb testing.TB, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.e.host.Load(ctx, path); err != nil {
		tb.Fatal(err)
	}
	if err := f.e.host.Remove(ctx, path); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkOCILoad: what a rule from a registry costs over the same rule
// from disk, the two measured alternately in one run: loading the Go
// thermostat (compiled by the runtime's cache after the first load, as a
// restart finds it) from its file, against pulling it from a registry on
// loopback into an empty cache, verifying its signature and digest, and
// loading it.
func BenchmarkOCILoad(b *testing.B) {
	f := newOCIFixture(b)
	f.loadDisk(b) // the compilation cache warm for both
	var disk, oci time.Duration
	b.ResetTimer()
	for range b.N {
		disk += f.loadDisk(b)
		oci += f.loadOCI(b)
	}
	b.StopTimer()
	b.ReportMetric(ms(disk/time.Duration(b.N)), "disk-load-ms")
	b.ReportMetric(ms(oci/time.Duration(b.N)), "oci-pull-verify-load-ms")
	b.ReportMetric(float64(oci)/float64(disk), "oci-x-disk")
	b.ReportMetric(0, "ns/op")
}

// TestOCILoad runs one of each load of BenchmarkOCILoad: the fixture works.
func TestOCILoad(t *testing.T) {
	f := newOCIFixture(t)
	f.loadDisk(t)
	f.loadOCI(t)
}
