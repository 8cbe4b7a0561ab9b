package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/ssrun/ssrun/admin"
)

// adminClientFlags are the flags of the admin endpoint's clients.
type adminClientFlags struct {
	addr      string
	tokenFile string
	output    string
	timeout   time.Duration
	fs        *pflag.FlagSet
}

func (f *adminClientFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.addr, "admin", admin.DefaultAddr, "admin endpoint of a running ssrun dev or run: HOST:PORT, :PORT or PORT (loopback); default: the latest ssrun dev's, else "+admin.DefaultAddr)
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "a `FILE` holding the endpoint's bearer token (the one its --admin-token-file names)")
	fs.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the answer")
}

// check validates the flags.
func (f *adminClientFlags) check() error {
	if f.output != "text" && f.output != "json" {
		return usageError("--output %q: want text or json", f.output)
	}
	return nil
}

// adminURL returns the URL of path on the endpoint at addr: "HOST:PORT",
// ":PORT" or "PORT" (on 127.0.0.1), or an http(s) URL.
func adminURL(addr, path string, q url.Values) (string, error) {
	base := strings.TrimSpace(addr)
	if !strings.Contains(base, "://") {
		if !strings.Contains(base, ":") {
			base = ":" + base
		}
		host, port, err := net.SplitHostPort(base)
		if err != nil || port == "" {
			return "", usageError("--admin %q: want HOST:PORT, :PORT or PORT", addr)
		}
		if host == "" {
			host = "127.0.0.1"
		}
		base = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(strings.TrimSuffix(base, "/") + path)
	if err != nil {
		return "", usageError("--admin %q: %v", addr, err)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// errAdminNotFound is a 404 answer with a JSON error: the endpoint has
// nothing for the request (e.g. no rule wrote the key).
type errAdminNotFound struct{ msg string }

func (e *errAdminNotFound) Error() string { return e.msg }

// adminGet GETs path?q from the admin endpoint and returns the JSON body.
// Errors say what to do: nothing listening (start dev or run with
// --admin), an endpoint without path (ssrun broker's), or the server's own
// error; a 404 with a JSON error is an *errAdminNotFound.
func adminGet(ctx context.Context, f *adminClientFlags, path string, q url.Values) ([]byte, error) {
	if !f.fs.Changed("admin") {
		if addr := devAdminAddr(); addr != "" {
			f.addr = addr // the endpoint of the latest ssrun dev
		}
	}
	u, err := adminURL(f.addr, path, q)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, usageError("--admin %q: %v", f.addr, err)
	}
	req.Header.Set("Accept", "application/json")
	if f.tokenFile != "" {
		token, err := readAdminToken(f.tokenFile)
		if err != nil {
			return nil, usageError("--admin-token-file: %v", err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: nothing answers at %s (connection refused): "+
				"start `ssrun dev` or `ssrun run` with --admin %s, or point --admin at its endpoint", f.addr, f.addr)}
		}
		return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s: %v", f.addr, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s: reading the answer: %v", f.addr, err)}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		if f.tokenFile == "" {
			return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s needs a token: give --admin-token-file FILE (or %s) with the token of its --admin-token-file", f.addr, envName("admin-token-file"))}
		}
		return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s refused the token in %s: it is not the one of its --admin-token-file", f.addr, f.tokenFile)}
	}
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if resp.StatusCode == http.StatusOK && isJSON {
		return body, nil
	}
	var e admin.ErrorDoc
	if isJSON && json.Unmarshal(body, &e) == nil && e.Error != "" {
		if resp.StatusCode == http.StatusNotFound {
			return nil, &errAdminNotFound{msg: e.Error}
		}
		return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s: %s", f.addr, shown(e.Error))}
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: %s has no %s: it answers for `ssrun dev` and `ssrun run`, not `ssrun broker`", f.addr, path)}
	}
	return nil, &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s answered %s for %s: %s", f.addr, shown(resp.Status), path, shown(fmt.Sprintf("%.200s", body)))}
}

// showAdmin prints an admin endpoint's JSON answer: as is for -o json,
// else decoded into a T and written by print.
func showAdmin[T any](out io.Writer, f *adminClientFlags, body []byte, print func(io.Writer, T) error) error {
	if f.output == "json" {
		_, err := out.Write(body)
		return err
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return &exitError{code: 2, msg: fmt.Sprintf("ssrun: admin endpoint %s: the answer is not valid: %v", f.addr, err)}
	}
	return print(out, v)
}
