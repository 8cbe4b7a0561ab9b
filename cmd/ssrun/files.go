package main

import "github.com/ssrun/ssrun/internal/safefile"

// The files ssrun is pointed at are read through internal/safefile: what
// is not a regular file (a link to /dev/zero, a named pipe, a device) is
// refused without reading it or waiting on it, and so is a file over its
// limit; every error names the file. Rule files go through
// rulefile.Read, test files and traces through package testrun.
const (
	// maxConfigBytes bounds ssrun.yaml (and a checkout's go.mod).
	maxConfigBytes = 4 << 20
	// maxSecretBytes bounds a password, token, key, certificate or CA
	// bundle file.
	maxSecretBytes = 1 << 20
)

// readConfigFile reads ssrun.yaml at path.
func readConfigFile(path string) ([]byte, error) { return safefile.Read(path, maxConfigBytes) }

// readSecretFile reads a password, token, key, certificate or CA file.
func readSecretFile(path string) ([]byte, error) { return safefile.Read(path, maxSecretBytes) }
