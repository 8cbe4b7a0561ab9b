//go:build unix && !solaris && !aix

package filelock

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// A second TryLock of a held lock fails with ErrLocked naming the file;
// after Release it succeeds.
func TestSecondHolderRefusedUntilReleased(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")
	first, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	} else if want := path + ": " + ErrLocked.Error(); err.Error() != want {
		t.Fatalf("second TryLock: %q, want %q", err, want)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := TryLock(path)
	if err != nil {
		t.Fatalf("TryLock after Release: %v", err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
	var none *Lock
	if err := none.Release(); err != nil {
		t.Fatalf("nil Release: %v", err)
	}
}

// A folder that cannot hold the lock file gives an error that is not
// ErrLocked.
func TestMissingFolderIsNotLocked(t *testing.T) {
	_, err := TryLock(filepath.Join(t.TempDir(), "no", "LOCK"))
	if err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock in a missing folder: %v", err)
	}
}
