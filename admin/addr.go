package admin

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultAddr is where the CLI's clients (ssrun status, ssrun why) look for
// the admin endpoint when not told.
const DefaultAddr = "127.0.0.1:9310"

// Loopback reports whether addr (HOST:PORT, as ListenAddr returns it) is
// reachable from this machine only: its host is "localhost" or a loopback
// IP (127.0.0.0/8, ::1). The wildcards 0.0.0.0 and ::, any other IP, and
// any other name (it may resolve to anything) are not: there the admin
// endpoint needs a token for what shows data.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListenAddr turns an --admin value into the address to listen on:
// "HOST:PORT" as given, ":PORT" or "PORT" on loopback (127.0.0.1), so the
// endpoint is reachable from outside only when a host is named (e.g.
// "0.0.0.0:9310" for Kubernetes probes).
func ListenAddr(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("admin address is empty: want HOST:PORT, :PORT or PORT")
	}
	if !strings.Contains(s, ":") {
		s = ":" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("admin address %q: want HOST:PORT, :PORT or PORT: %w", s, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("admin address %q: port %q is not a number from 0 to 65535", s, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
