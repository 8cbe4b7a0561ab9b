package broker

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// FuzzParsePasswords: the --passwords file is hostile input. Parsing never
// panics; an error is a *PasswordFileError naming the file (and a line of
// it when about one); an accepted file has users, each with a hash of at
// most maxPasswordCost; a user `ssrun passwd` takes (CheckUserName) reads
// back under its own name, added to an accepted file or alone; a user whose
// hash is one of the seeds' verifies with the password that made it.
//
// The seeds' hashes are made once at bcrypt.MinCost; the body only parses,
// and hashes (the dummy, a check) only for files of cost 5 at most.
func FuzzParsePasswords(f *testing.F) {
	const path = "/etc/ssrun/passwords"
	known := map[string]string{} // hash -> the password that made it
	hashOf := func(pw string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			f.Fatal(err)
		}
		known[string(h)] = pw
		return string(h)
	}
	alice, bob := hashOf("s3cret"), hashOf("pw with spaces: and colons")
	htpasswd := "$2y$05$Jq5YWvS.vDfKT/fc/gcTBOb9WHNwtf32G183UFkOHwU.7u4u/et6e" // htpasswd -B
	for _, s := range []struct{ data, user string }{
		{"alice:" + alice + "\n", "carol"},
		{"# users\r\n\r\n  alice:" + alice + "  \r\nbob:" + bob + "\n", "dave"},
		{"bob:" + htpasswd, "alice"},
		{"alice:" + alice + "\nalice:" + bob + "\n", "bob"},
		{"alice\n", "a b"},
		{":" + alice + "\n", " x"},
		{"alice:plain\n", "#x"},
		{"# nobody\n", "x\u0085"},
		{"alice:" + alice + "x\n", "x"},
		{"alice:" + alice[:59] + "\n", "x"},
		{"alice:" + strings.Replace(alice, "$04$", "$31$", 1) + "\n", "x"},
		{"alice:" + strings.Replace(alice, "$2a$", "$1a$", 1) + "\n", "x"},
		{"alice:" + alice[:30] + "$" + alice[31:] + "\n", "x"},
		{"alice:" + alice[:30] + "!" + alice[31:] + "\n", "x"},
		{"alice:" + strings.Repeat("x", 70000) + "\n", "x"},
		{"", ""},
	} {
		f.Add([]byte(s.data), s.user)
	}
	f.Fuzz(func(t *testing.T, data []byte, user string) {
		users, cost, err := parsePasswordLines(path, data)
		checkPasswordFileError(t, path, data, err)
		if err == nil {
			if len(users) == 0 || cost < bcrypt.MinCost || cost > maxPasswordCost {
				t.Fatalf("accepted with %d users, cost %d", len(users), cost)
			}
			for u, h := range users {
				if u == "" || strings.Contains(u, ":") || !bytes.Contains(data, []byte(u+":")) {
					t.Errorf("user %q: not a name from the file", u)
				}
				if c, err := checkHash(string(h)); err != nil || c > cost {
					t.Errorf("user %q: hash %q (cost %d, %v) accepted, file cost %d", u, h, c, err, cost)
				}
			}
			if cost <= 5 { // cheap: the whole parse, dummy included, and one known hash
				creds, err := parsePasswords(path, data)
				if err != nil {
					t.Fatalf("parsePasswordLines accepted, parsePasswords: %v", err)
				}
				for u, h := range users {
					if pw, ok := known[string(h)]; ok {
						if !creds.check([]byte(u), []byte(pw)) || creds.check([]byte(u), []byte(pw+"x")) {
							t.Errorf("user %q: its password does not verify, or a wrong one does", u)
						}
						break
					}
				}
			}
		}
		if CheckUserName(user) != nil {
			return
		}
		// A line `ssrun passwd USER` prints reads back as USER, alone or
		// after an accepted file's lines.
		line := user + ":" + alice + "\n"
		got, _, err := parsePasswordLines(path, []byte(line))
		if err != nil || len(got) != 1 || string(got[user]) != alice {
			t.Fatalf("user %q: line %q read as %q, %v", user, line, keys(got), err)
		}
		if users == nil || users[user] != nil {
			return
		}
		both := append(append(bytes.Clone(data), '\n'), line...)
		got, _, err = parsePasswordLines(path, both)
		if err != nil || len(got) != len(users)+1 || string(got[user]) != alice {
			t.Fatalf("user %q added to an accepted file: read as %q, %v", user, keys(got), err)
		}
	})
}

// checkPasswordFileError: err is nil or a *PasswordFileError naming path,
// and its line (if any) is one of data's, named as path:line.
func checkPasswordFileError(t *testing.T, path string, data []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var pe *PasswordFileError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPasswordFile) {
		t.Fatalf("error %v: not a *PasswordFileError", err)
	}
	if pe.File != path || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v does not name %s", err, path)
	}
	if pe.Line < 0 || pe.Line > bytes.Count(data, []byte("\n"))+1 {
		t.Fatalf("error %v: line %d of a file of %d lines", err, pe.Line, bytes.Count(data, []byte("\n"))+1)
	}
	if pe.Line > 0 && !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", path, pe.Line)) {
		t.Fatalf("error %v does not name %s:%d", err, path, pe.Line)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
