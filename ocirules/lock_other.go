//go:build !unix || solaris || aix

package ocirules

import "errors"

// lockFile refuses: without flock(2) two processes could swap one cache
// folder under each other, and the folder's links need POSIX symlinks.
func lockFile(path string) (unlock func() error, err error) {
	return nil, errors.New("rules from an OCI registry (oci://) are supported on Linux, macOS and the BSDs only")
}
