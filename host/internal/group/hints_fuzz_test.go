package group

import (
	"strings"
	"testing"

	"github.com/ssrun/ssrun/host/internal/patterns"
)

// FuzzParsePatternLines: another member's published patterns are read from
// the store, where a hostile writer can put anything. Parsing never
// panics; it reads the lines of at most maxPublished bytes (so at most
// maxMemberPatterns patterns), cutting only a longer value; it returns,
// in order, exactly the lines that patterns.Compile takes, and each
// matches what the pattern compiled from its line matches, even once the
// value's buffer is written over.
func FuzzParsePatternLines(f *testing.F) {
	for _, s := range []struct{ v, key string }{
		{"rooms/*/temp\nthermostats/*", "rooms/kitchen/temp"},
		{"a/*\n[\n\nb/?", "b/c"},
		{"a*\na*\n", "abc"},
		{`x\*` + "\n" + `[!a-c]z` + "\n" + "{a,b}/*", "x*"},
		{"[z-a]\n\\\n*?*?*?\n", "aaa"},
		{"a/*\r\nb/*\r\n", "a/x\r"},
		{"\x00\n\xff\xfe*\n", "\xff\xfe"},
		{"$ssrun/group/g/patterns/*", "$ssrun/group/g/patterns/m1"},
		{strings.Repeat("a*\n", 100), "a"},
		{"a/*\n" + strings.Repeat("*", 70<<10) + "\nb/?", "b/c"},
		{strings.Repeat("k", maxPublished-1) + "\nk*", "kk"},
		{strings.Repeat("k", maxPublished) + "\nk*", "kk"},
		{"", ""},
	} {
		f.Add([]byte(s.v), s.key)
	}
	f.Fuzz(func(t *testing.T, v []byte, key string) {
		got, cut := parsePatternLines(v)
		if cut < 0 || cut > len(v) || (cut > 0) != (len(v) > maxPublished) {
			t.Fatalf("%d bytes of %d left out (at most %d are read)", cut, len(v), maxPublished)
		}
		if len(got) > maxMemberPatterns {
			t.Fatalf("%d patterns, more than %d", len(got), maxMemberPatterns)
		}
		read := string(v[:len(v)-cut])
		if cut > 0 && len(v) > len(read) && !strings.HasPrefix(string(v[len(read):]), "\n") && read != "" {
			t.Fatalf("cut inside a line: read %d bytes, next %q", len(read), v[len(read):min(len(v), len(read)+10)])
		}
		var want []patterns.Pattern
		for _, line := range strings.Split(read, "\n") {
			if p, err := patterns.Compile(line); err == nil {
				want = append(want, p)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d patterns, want %d (the lines that compile)", len(got), len(want))
		}
		probes := []string{key, key + "/x", string(v[:min(len(v), 32)])}
		for i := range got[:min(len(got), 4)] {
			probes = append(probes, got[i].Src, got[i].Prefix())
		}
		// The value's buffer may be reused: what was parsed must not change.
		for i := range v {
			v[i] = 'x'
		}
		for i, p := range got {
			if p.Src != want[i].Src {
				t.Fatalf("pattern %d is %q, want %q", i, p.Src, want[i].Src)
			}
			if i >= 8 {
				continue
			}
			for _, k := range probes {
				if p.Match(k) != want[i].Match(k) {
					t.Errorf("pattern %q: Match(%q) = %v, its compiled line says %v", p.Src, k, p.Match(k), want[i].Match(k))
				}
			}
		}
	})
}
