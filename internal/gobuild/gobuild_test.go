package gobuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestExeSetsLdflags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hello")
	if err := Exe(bin, "./testdata/hello", "-X=main.version=v7"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "v7" {
		t.Fatalf("built program printed %q, want v7", out)
	}
}

func TestWASMBuildsAModule(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "hello.wasm")
	if err := WASM(dst, "./testdata/hello"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("%s does not start with the WebAssembly magic: % x", dst, b[:min(8, len(b))])
	}
}

func TestBuildErrorHoldsTheCommandAndOutput(t *testing.T) {
	err := Exe(filepath.Join(t.TempDir(), "broken"), "./testdata/broken")
	if err == nil {
		t.Fatal("a package that does not compile built")
	}
	for _, want := range []string{"go build -o ", "./testdata/broken", "undefinedForGobuildTest"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// A Dir builds each name once, whoever asks, and forgets it all on Remove.
func TestDirBuildsOnce(t *testing.T) {
	d := &Dir{Prefix: "gobuild-test-"}
	var wg sync.WaitGroup
	paths := make([]string, 4)
	for i := range paths {
		wg.Go(func() {
			p, err := d.Exe("hello", "./testdata/hello")
			if err != nil {
				t.Error(err)
			}
			paths[i] = p
		})
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("paths %v, want one", paths)
		}
	}
	// A second call does not build again: with the file gone, it still
	// answers the first build's path.
	if err := os.Remove(paths[0]); err != nil {
		t.Fatal(err)
	}
	if p, err := d.Exe("hello", "./testdata/hello"); err != nil || p != paths[0] {
		t.Fatalf("second call: %q, %v; want %q", p, err, paths[0])
	}
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Fatalf("the second call built again (stat: %v)", err)
	}
	// A build that fails is the caller's error.
	if _, err := d.Exe("broken", "./testdata/broken"); err == nil {
		t.Fatal("a package that does not compile built")
	}
	dir, err := d.Path()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after Remove, %s: %v", dir, err)
	}
}
