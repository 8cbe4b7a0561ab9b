package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"
)

// probeTimeout bounds the first look at the broker of `ssrun run`, which
// delays its start: a refusal comes at once, and a silent address is left
// to the client.
const probeTimeout = time.Second

// refusedHint is what a one-shot command says when nothing listens at the
// broker's address.
const refusedHint = "nothing listens there: start `ssrun broker` or `ssrun dev`, or give the broker's address with --broker HOST:PORT"

// probe fails fast, with refusedHint, when the broker at server (an
// mqtt:// or mqtts:// URL) refuses the connection, instead of letting the
// client retry until its timeout. Any other outcome is left to the client.
func probe(ctx context.Context, server string, timeout time.Duration) error {
	u, err := url.Parse(server)
	if err != nil {
		return nil
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err == nil {
		_ = c.Close()
		return nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("connecting to %s: connection refused: %s", server, refusedHint)
	}
	return nil
}

// tlsNote explains, when the settings chose TLS only because the broker is
// not on a loopback address, that they did and how to turn it off; "" when
// TLS was asked for or is off.
func tlsNote(s connSettings) string {
	if s.UseTLS != nil || s.Hostname == "" || isLoopback(s.Hostname) {
		return ""
	}
	return fmt.Sprintf("%s is not a loopback address, so the connection uses TLS (port 8883 unless given); for a broker without TLS, add --no-tls", s.Hostname)
}

// withTLSNote adds tlsNote(s), if any, to a connection error.
func withTLSNote(err error, s connSettings) error {
	if note := tlsNote(s); note != "" {
		return fmt.Errorf("%w (%s)", err, note)
	}
	return err
}

// connectionNotes logs, for a long-running command connecting to server
// with the settings s, that TLS was chosen for a non-loopback broker, and
// that the broker refused the first connection (the client keeps trying).
func (a *app) connectionNotes(ctx context.Context, s connSettings, server string) {
	if note := tlsNote(s); note != "" {
		a.log.Info(note)
	}
	if err := probe(ctx, server, probeTimeout); err != nil {
		a.log.Warn("broker unreachable; retrying until it answers", "err", err)
	}
}
