package broker

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestPasswordFileErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hash := string(h)
	for _, tc := range []struct{ name, content, want string }{
		{"no colon", "# users\n\nalice\n", ":3: want username:bcrypt-hash"},
		{"empty user", ":" + hash + "\n", ":1: empty username"},
		{"bad hash", "alice:plain\n", `:1: user "alice": not a bcrypt hash`},
		{"duplicate", "alice:" + hash + "\nalice:" + hash + "\n", `:2: duplicate user "alice"`},
		{"empty", "# nobody\n", "no users"},
		{"hash with more after it", "alice:" + hash + "x\n", "61 characters, want 60"},
		{"hash cut short", "alice:" + hash[:59] + "\n", "59 characters, want 60"},
		{"cost 31", "alice:" + strings.Replace(hash, "$04$", "$31$", 1) + "\n", "cost 31, more than 17"},
		{"not base64", "alice:" + hash[:40] + "!" + hash[41:] + "\n", `character '!'`},
		{"version", "alice:" + strings.Replace(hash, "$2a$", "$1a$", 1) + "\n", `version "$1a$"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := dir + "/" + strings.ReplaceAll(tc.name, " ", "_")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := readPasswordFile(path)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s and %q", err, path, tc.want)
			}
		})
	}
	path := dir + "/ok"
	content := "# comment\r\n\r\n  alice:" + hash + "  \r\nbob:$2y$05$Jq5YWvS.vDfKT/fc/gcTBOb9WHNwtf32G183UFkOHwU.7u4u/et6e\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, _, err := readPasswordFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !creds.check([]byte("alice"), []byte("pw")) || creds.check([]byte("alice"), []byte("nope")) || creds.check([]byte("carol"), []byte("pw")) {
		t.Fatal("credential checks wrong")
	}
}
