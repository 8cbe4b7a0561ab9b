package glob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"*", "", true},
		{"*", "a/b/c", true},
		{"thermostats/*/setPoint", "thermostats/0001/setPoint", true},
		{"thermostats/*/setPoint", "thermostats/0001/mode", false},
		{"key*", "key", true},
		{"key*", "ke", false},
		{"a?c", "aéc", true},
		{"a?c", "a\xffc", true},
		{"[a-c]x", "bx", true},
		{"[!a-c]x", "ax", false},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"{x}", "{x}", true}, // no templates: '{' is ordinary
		{"*a*a*a*b", strings.Repeat("a", 5000), false},
	} {
		g, err := Compile(c.pattern, nil)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := g.MatchString(c.subject, nil); got != c.want {
			t.Errorf("%q matching %q: %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
	for _, bad := range []string{"[", "[]", "[a-", "[b-a]", "a\\"} {
		if _, err := Compile(bad, nil); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

func TestPrefix(t *testing.T) {
	for pattern, want := range map[string]string{
		"thermostats/*/setPoint": "thermostats/",
		"key*":                   "key",
		"exact":                  "exact",
		"*":                      "",
		"?x":                     "",
		"[ab]x":                  "",
		`a\*b*`:                  "a*b",
	} {
		g, err := Compile(pattern, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Prefix(); got != want {
			t.Errorf("Prefix(%q) = %q, want %q", pattern, got, want)
		}
	}
}

// FuzzMatch: any pattern and subject compile or fail cleanly, a subject
// matching starts with the pattern's Prefix, and a pattern matches its own
// literal text when it holds no special character.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"*", "x"}, {"a*b?c[d-f]", "aXbYce"}, {`\[*`, "[x"}, {"[!", ""}, {strings.Repeat("*?", 100), strings.Repeat("a", 300)}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		g, err := Compile(pattern, nil)
		if err != nil {
			return
		}
		if g.MatchString(subject, nil) && !strings.HasPrefix(subject, g.Prefix()) {
			t.Fatalf("%q matches %q but does not start with its prefix %q", subject, pattern, g.Prefix())
		}
		if !strings.ContainsAny(pattern, `*?[\`) && !g.MatchString(pattern, nil) {
			t.Fatalf("literal %q does not match itself", pattern)
		}
	})
}
