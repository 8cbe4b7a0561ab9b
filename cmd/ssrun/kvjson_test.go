package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// `ssrun kv get -o json` shows the value and its version (what --fence and
// scripts need), `kv watch -o json` prints one object per change, and the
// exit statuses tell usage (2), failure to reach the broker (3) and not
// authorized (4) apart.
func TestKVJSONAndExitCodes(t *testing.T) {
	b, kv := bobKV(t)
	type obj struct {
		Key, Op, Value, Version string
		Found                   *bool
	}
	parse := func(line string) obj {
		t.Helper()
		var o obj
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return o
	}

	lease := kv("set", "bob/lock", "me", "--nex", "--px", "30s")
	if lease.code != 0 {
		t.Fatalf("lease: %+v", lease)
	}
	r := kv("get", "bob/lock", "-o", "json")
	got := parse(strings.TrimSpace(r.stdout))
	if r.code != 0 || got.Key != "bob/lock" || got.Found == nil || !*got.Found || got.Value != "me" || "OK "+got.Version+"\n" != lease.stdout {
		t.Fatalf("get -o json: %+v, want the value and the version the set printed (%q)", r, lease.stdout)
	}
	if r := kv("set", "bob/guarded", "v1", "--fence", got.Version); r.code != 0 {
		t.Fatalf("set --fence with the version get printed: %+v", r)
	}
	r = kv("get", "bob/none", "-o", "json")
	if got := parse(strings.TrimSpace(r.stdout)); r.code != 1 || got.Found == nil || *got.Found || got.Version != "" {
		t.Fatalf("get -o json of an absent key: %+v", r)
	}

	w := startProc(t, "kv", "--broker", b.Addr(), "--username", "bob", "watch", "bob/w", "-o", "json")
	waitOutput(t, w.stderr, regexp.MustCompile(`watching 1 key`))
	kv("set", "bob/w", "one")
	kv("del", "bob/w")
	waitOutput(t, w.stdout, regexp.MustCompile(`"op":"DELETE"`))
	w.signal(os.Interrupt)
	if code := w.wait("watch"); code != 0 {
		t.Fatalf("watch exit %d:\n%s", code, w.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(w.stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("watch -o json printed %d lines, want 2:\n%s", len(lines), w.stdout.String())
	}
	set, del := parse(lines[0]), parse(lines[1])
	if set.Key != "bob/w" || set.Op != "SET" || set.Value != "one" || set.Version == "" ||
		del.Key != "bob/w" || del.Op != "DELETE" || del.Version <= set.Version {
		t.Fatalf("watch -o json:\n%s", w.stdout.String())
	}

	for _, c := range []struct {
		what string
		args []string
		code int
	}{
		{"usage: no key", []string{"get"}, 2},
		{"usage: bad -o", []string{"get", "bob/lock", "-o", "yaml"}, 2},
		{"not authorized: a key outside the ACL's grants", []string{"get", "alice/x"}, 4},
		{"failed: the store refuses an unfenced write to a fenced key", []string{"set", "bob/guarded", "v2"}, 3},
	} {
		if r := kv(c.args...); r.code != c.code {
			t.Errorf("%s: exit %d, want %d: %+v", c.what, r.code, c.code, r)
		}
	}
	ln := runBin(t, nil, "kv", "--broker", "127.0.0.1:1", "get", "k")
	if ln.code != 3 {
		t.Errorf("nothing listening: exit %d, want 3: %+v", ln.code, ln)
	}
	if help := runBin(t, nil, "kv", "--help"); !strings.Contains(help.stdout, "4  not authorized") || !strings.Contains(help.stdout, "2  usage") {
		t.Errorf("kv --help does not document the exit statuses:\n%s", help.stdout)
	}
}
