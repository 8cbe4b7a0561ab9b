package safefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/safefile"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestReadRegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.lua")
	want := strings.Repeat("x", 10)
	if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := safefile.Read(p, 10) // exactly the limit
	if err != nil || string(got) != want {
		t.Fatalf("Read = %q, %v; want %q", got, err, want)
	}
	if _, err := safefile.Read(filepath.Join(t.TempDir(), "missing.lua"), 10); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.lua") {
		t.Fatalf("missing file: %v", err)
	}
}

// wantRefused checks that err refuses the file at p with target, naming
// the file and, for a size, the limit.
func wantRefused(t *testing.T, err error, p string, target error, words ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
	for _, w := range append([]string{p}, words...) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// Neither a link to /dev/zero nor a named pipe is read, opened for long or
// waited on, and a sparse file over the limit is refused by its size.
func TestRefusesWhatIsNotASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		make       func(testing.TB, string)
		kind       string
	}{
		{"link to /dev/zero", "z.lua", testutil.LinkDevZero, "character device"},
		{"named pipe without a writer", "f.lua", testutil.Mkfifo, "named pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.file)
			tc.make(t, p)
			var err error
			testutil.Returns(t, "Read of a "+tc.name, func() { _, err = safefile.Read(p, 1<<20) })
			wantRefused(t, err, p, safefile.ErrNotRegular, tc.kind)
		})
	}
	t.Run("directory", func(t *testing.T) {
		_, err := safefile.Read(dir, 1<<20)
		wantRefused(t, err, dir, safefile.ErrNotRegular, "directory")
	})
	t.Run("sparse file over the limit", func(t *testing.T) {
		p := filepath.Join(dir, "big.lua")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		const limit = 64 << 20
		if err := f.Truncate(limit + 1); err != nil {
			t.Fatal(err)
		}
		f.Close()
		_, err = safefile.Read(p, limit)
		wantRefused(t, err, p, safefile.ErrTooLarge, "67108865 bytes", "limit of 64 MiB")
	})
}

// A file that grows past the limit after it was opened is read up to the
// limit and one byte, then refused.
func TestFileGrowingPastTheLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "grows.yaml")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := safefile.Open(p, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(p, []byte("123456789abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, err := f.Read(buf)
	if n != 8 || string(buf[:n]) != "12345678" {
		t.Errorf("read %d bytes %q, want the 8 of the limit", n, buf[:n])
	}
	wantRefused(t, err, p, safefile.ErrTooLarge, "limit of 8 bytes")
	if _, err := f.Read(buf); !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("read after the limit: %v, want ErrTooLarge again", err)
	}
}
