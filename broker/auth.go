package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/ssrun/ssrun/internal/safefile"
)

// This file holds the broker's access rules: who may bind where without
// credentials, and the password file (htpasswd -B compatible).

// ErrPasswordFile is wrapped by every error about the password file.
var ErrPasswordFile = errors.New("broker: bad password file")

// PasswordFileError names the file and line of a password file problem. It
// unwraps to ErrPasswordFile.
type PasswordFileError struct {
	File string
	Line int // 0 when the problem is not tied to a line
	Msg  string
	Err  error // underlying error, if any
}

func (e *PasswordFileError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Err != nil {
		return fmt.Sprintf("password file %s: %s: %v", loc, e.Msg, e.Err)
	}
	return fmt.Sprintf("password file %s: %s", loc, e.Msg)
}

// Unwrap returns ErrPasswordFile and the underlying error.
func (e *PasswordFileError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrPasswordFile, e.Err}
	}
	return []error{ErrPasswordFile}
}

// HashPassword returns the bcrypt hash of pw for a password file line
// `username:<hash>` (the format `htpasswd -B` writes).
func HashPassword(pw []byte) (string, error) {
	if len(pw) == 0 {
		return "", errors.New("hash password: empty password")
	}
	h, err := bcrypt.GenerateFromPassword(pw, bcrypt.DefaultCost)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return string(h), nil
}

// CheckUserName says whether name can be a user of a password file: the
// line `name:hash` reads back as name. A ':' or a line break would end the
// name, and a line is read trimmed of spaces and skipped when it starts
// with '#'.
func CheckUserName(name string) error {
	switch {
	case name == "":
		return errors.New("empty user name")
	case strings.ContainsAny(name, ":\r\n"):
		return fmt.Errorf("user name %q: no ':' or line break", name)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("user name %q: no space before or after", name)
	case strings.HasPrefix(name, "#"):
		return fmt.Errorf("user name %q: a line starting with '#' is a comment", name)
	}
	return nil
}

// credentials maps user names to bcrypt hashes.
type credentials struct {
	users map[string][]byte
	// dummy is compared against for unknown users, so that they cost as
	// much time as a wrong password (same bcrypt cost as the file's users).
	dummy []byte
}

// maxPasswordFileSize bounds the password file.
const maxPasswordFileSize = 1 << 20

// readPasswordFile reads and parses the password file; data is its content.
// It refuses anything but a regular file of at most maxPasswordFileSize (a
// named pipe, a link to /dev/zero: internal/safefile).
func readPasswordFile(path string) (c *credentials, data []byte, err error) {
	data, err = safefile.Read(path, maxPasswordFileSize)
	if err != nil {
		return nil, nil, &PasswordFileError{File: path, Msg: "cannot read", Err: err}
	}
	c, err = parsePasswords(path, data)
	return c, data, err
}

// maxPasswordCost is the highest bcrypt cost a password file may use, the
// highest `htpasswd -B -C` writes: the broker hashes once at the file's
// highest cost when it loads (the dummy for unknown users) and each login
// costs as much, so cost 31 (which bcrypt reads) would hang the load for
// days.
const maxPasswordCost = 17

// parsePasswords parses lines `username:bcrypt-hash`; blank lines and lines
// starting with '#' are skipped. path names the file in errors.
func parsePasswords(path string, data []byte) (*credentials, error) {
	users, maxCost, err := parsePasswordLines(path, data)
	if err != nil {
		return nil, err
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("unknown user"), maxCost)
	if err != nil {
		return nil, &PasswordFileError{File: path, Msg: "cannot hash", Err: err}
	}
	return &credentials{users: users, dummy: dummy}, nil
}

// parsePasswordLines is parsePasswords but the dummy hash: the users and the
// highest bcrypt cost of their hashes.
func parsePasswordLines(path string, data []byte) (users map[string][]byte, maxCost int, err error) {
	users = map[string][]byte{}
	maxCost = bcrypt.MinCost
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, 0, &PasswordFileError{File: path, Line: n, Msg: "want username:bcrypt-hash"}
		case user == "":
			return nil, 0, &PasswordFileError{File: path, Line: n, Msg: "empty username"}
		case users[user] != nil:
			return nil, 0, &PasswordFileError{File: path, Line: n, Msg: fmt.Sprintf("duplicate user %q", user)}
		}
		cost, err := checkHash(hash)
		if err != nil {
			return nil, 0, &PasswordFileError{File: path, Line: n, Msg: fmt.Sprintf("user %q: not a bcrypt hash", user), Err: err}
		}
		maxCost = max(maxCost, cost)
		users[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, &PasswordFileError{File: path, Msg: "cannot read", Err: err}
	}
	if len(users) == 0 {
		return nil, 0, &PasswordFileError{File: path, Msg: "no users"}
	}
	return users, maxCost, nil
}

// bcryptHashLen is the length of a bcrypt hash: $2a$NN$, 22 characters of
// salt and 31 of hash.
const bcryptHashLen = 60

// checkHash returns the cost of a bcrypt hash as htpasswd -B writes it.
// bcrypt.Cost alone reads a hash cut short or with more after it, or with
// characters bcrypt's base64 has not: a password never matches such a hash,
// and the user could never log in.
func checkHash(hash string) (int, error) {
	if len(hash) != bcryptHashLen {
		return 0, fmt.Errorf("%d characters, want %d", len(hash), bcryptHashLen)
	}
	cost, err := bcrypt.Cost([]byte(hash))
	if err != nil {
		return 0, fmt.Errorf("bcrypt: %w", err)
	}
	if cost > maxPasswordCost {
		return 0, fmt.Errorf("cost %d, more than %d (what htpasswd -B -C allows): each login would take minutes or more", cost, maxPasswordCost)
	}
	switch v := hash[:4]; {
	case v != "$2a$" && v != "$2b$" && v != "$2y$":
		return 0, fmt.Errorf("version %q: want $2a$, $2b$ or $2y$", v)
	case hash[6] != '$':
		return 0, errors.New("want $2a$NN$ (two digits of cost) before salt and hash")
	}
	for _, c := range hash[7:] {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '/') {
			return 0, fmt.Errorf("character %q: not in bcrypt's base64 (./A-Za-z0-9)", c)
		}
	}
	return cost, nil
}

// with returns c (nil: none) plus users (name -> bcrypt hash); a name
// already there, an empty one or a hash that is not bcrypt is an error.
func (c *credentials) with(users map[string][]byte) (*credentials, error) {
	out := &credentials{users: map[string][]byte{}}
	maxCost := bcrypt.MinCost
	if c != nil {
		maps.Copy(out.users, c.users)
		out.dummy = c.dummy
		if cost, err := bcrypt.Cost(c.dummy); err == nil {
			maxCost = cost
		}
	}
	for name, hash := range users {
		cost, err := checkHash(string(hash))
		switch {
		case name == "":
			return nil, errors.New("empty user name")
		case out.users[name] != nil:
			return nil, fmt.Errorf("user %q is also in the password file", name)
		case err != nil:
			return nil, fmt.Errorf("user %q: not a bcrypt hash: %w", name, err)
		}
		out.users[name] = hash
		if cost > maxCost || out.dummy == nil {
			maxCost = max(maxCost, cost)
			dummy, err := bcrypt.GenerateFromPassword([]byte("unknown user"), maxCost)
			if err != nil {
				return nil, fmt.Errorf("hash: %w", err)
			}
			out.dummy = dummy
		}
	}
	return out, nil
}

// check reports whether user/password match an entry.
func (c *credentials) check(user, password []byte) bool {
	hash, known := c.users[string(user)]
	if !known {
		hash = c.dummy
	}
	ok := bcrypt.CompareHashAndPassword(hash, password) == nil
	return ok && known
}

// isLoopback reports whether host (from host:port) only accepts local
// connections: "localhost" or a loopback IP. An empty host means every
// interface and is not loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// isLocalAddr reports whether a bound listener address is loopback-only (or
// not on the network at all, e.g. a unix socket).
func isLocalAddr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(a.String())
	return err == nil && isLoopback(host)
}
