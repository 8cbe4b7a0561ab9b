package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "frob"}, `unknown command "frob" for "ssrun kv"`},
		{[]string{"kv", "gte", "k"}, "did you mean get?"},
		{[]string{"kv", "get"}, "usage: ssrun kv get KEY"},
		{[]string{"kv", "set", "k"}, "usage: ssrun kv set KEY VALUE"},
		{[]string{"check"}, "usage: ssrun check PATH..."},
		{[]string{"dev"}, "usage: ssrun dev DIR"},
		{[]string{"passwd", "a", "b"}, "usage: ssrun passwd USER"},
		{[]string{"kv", "get", "k", "--bogus"}, "usage: ssrun kv get KEY"},
	} {
		if r := runCLI(t, "", tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v, want status 2 and %q", tc.args, r, tc.want)
		}
	}
	if r := runCLI(t, "", "kv"); r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("kv alone shows its help: %+v", r)
	}
}

func TestHelpNamesFilesAndDefaults(t *testing.T) {
	help := runCLI(t, "", "broker", "--help").stdout
	if !regexp.MustCompile(`--passwords FILE +a FILE of user:bcrypt-hash lines`).MatchString(help) {
		t.Errorf("--passwords help:\n%s", help)
	}
	help = runCLI(t, "", "run", "--help").stdout
	for _, flag := range []string{"tls", "no-tls", "client-id", "broker", "config", "shutdown-timeout", "log-level", "log-format"} {
		line := regexp.MustCompile(`(?m)^ +--` + flag + `\b.*$`).FindString(help)
		if !strings.Contains(line, "default") {
			t.Errorf("--%s help gives no default: %q", flag, line)
		}
	}
}
