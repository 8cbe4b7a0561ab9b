package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes files (name -> content) into dir, mode 0644.
func WriteFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
