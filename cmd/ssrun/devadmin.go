package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// `ssrun dev` serves its admin endpoint by default on a free loopback port
// and writes the address to devAdminFile, where `ssrun status` and `ssrun
// why` given no --admin look first: they work out of the box in
// development. The file is in the user's runtime folder ($XDG_RUNTIME_DIR),
// else in ssrun's folder of the user's cache, beside the WebAssembly
// compilation cache: folders no other user can write to.

// devAdminFile is the file that holds the admin address of the latest
// `ssrun dev` still running.
func devAdminFile() (string, error) {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		var err error
		if dir, err = os.UserCacheDir(); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "ssrun", "dev-admin"), nil
}

// publishDevAdmin writes addr, the endpoint's listening address, to
// devAdminFile as an address a client on this machine reaches (a wildcard
// host becomes 127.0.0.1). The returned function removes the file if it
// still holds addr (another dev may have started since). Failing to write
// it is not an error of dev: it returns a reason to log instead.
func publishDevAdmin(addr string) (remove func(), problem error) {
	remove = func() {}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return remove, err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	line := []byte(net.JoinHostPort(host, port) + "\n")
	p, err := devAdminFile()
	if err != nil {
		return remove, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return remove, err
	}
	tmp := fmt.Sprintf("%s.%d", p, os.Getpid())
	if err := os.WriteFile(tmp, line, 0o600); err != nil {
		return remove, err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return remove, err
	}
	return func() {
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, line) {
			_ = os.Remove(p)
		}
	}, nil
}

// devAdminAddr returns the address in devAdminFile, or "" when there is
// none.
func devAdminAddr() string {
	p, err := devAdminFile()
	if err != nil {
		return ""
	}
	b, err := readConfigFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
