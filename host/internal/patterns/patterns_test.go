package patterns

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// Hostile and malformed patterns are refused with an error saying what is
// wrong; a long run of wildcards within the bound compiles and matches in
// bounded time.
func TestCompile(t *testing.T) {
	for src, want := range map[string]string{
		"":                                   "empty",
		"[":                                  "unterminated [",
		`\`:                                  "backslash",
		"a[z-a]":                             "out of order",
		strings.Repeat("*?", MaxLen/2) + "x": "more than 65536",
	} {
		_, err := Compile(src)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%.20q) = %v, want ErrInvalid saying %q", src, err, want)
		}
	}
	p, err := Compile(strings.Repeat("*?", MaxLen/2))
	if err != nil {
		t.Fatal(err)
	}
	if p.Match(strings.Repeat("k", 100)) {
		t.Error("64 KiB of *? matched a 100-byte key (it needs 32768 characters)")
	}
	if !p.Match(strings.Repeat("k", MaxLen/2)) {
		t.Error("64 KiB of *? did not match a key of 32768 characters")
	}
	p, _ = Compile(`thermostats/*/set\*`)
	if !p.Match("thermostats/a/b/set*") || p.Match("thermostats/a/setX") || p.Prefix() != "thermostats/" {
		t.Errorf("thermostats/*/set\\* matches wrongly (prefix %q)", p.Prefix())
	}
}

// A pattern is denied when its keys are all reserved, or when its literal
// beginning shares none with the read permissions'.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		perms   []string
		denied  bool
	}{
		{"thermostats/*", nil, false},
		{"thermostats/*", []string{}, true},
		{"thermostats/*", []string{"thermostats/**"}, false},
		{"thermostats/*", []string{"hvac/**", "th*"}, false},
		{"thermo*", []string{"thermostats/*/setPoint"}, false},
		{"secret/*", []string{"thermostats/**", "hvac/*"}, true},
		{"*", []string{"thermostats/**"}, false},
		{"$ssrun/*", nil, true},
		{"$ssrun/timers/x", nil, true},
		{"$ss*", nil, false},
	} {
		p, err := Compile(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check("$ssrun/", tc.perms)
		if (err != nil) != tc.denied || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("Check(%q, %q) = %v, want denied %t", tc.pattern, tc.perms, err, tc.denied)
		}
	}
}

// Patterns come due every interval from when they were set, in order;
// setting the same interval keeps the due time, 0 drops the pattern.
func TestSchedule(t *testing.T) {
	var s Schedule
	t0 := time.Unix(1000, 0)
	if _, ok := s.Next(); ok {
		t.Fatal("an empty schedule has a next time")
	}
	s.Set("b", 10*time.Second, t0)
	s.Set("a", 10*time.Second, t0)
	s.Set("c", 30*time.Second, t0)
	s.Set("a", 10*time.Second, t0.Add(5*time.Second)) // unchanged: still due at 10s
	if next, _ := s.Next(); !next.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("Next = %v", next)
	}
	if got := s.Due(t0.Add(9 * time.Second)); len(got) != 0 {
		t.Errorf("Due at 9s = %q", got)
	}
	if got := s.Due(t0.Add(10 * time.Second)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Due at 10s = %q", got)
	}
	s.Set("b", 0, t0)
	if got := s.Due(t0.Add(30 * time.Second)); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("Due at 30s = %q (b was dropped)", got)
	}
}

// No pattern crashes Compile, Match, Prefix or Check, and a compiled
// pattern's literal beginning starts every key it matches.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"[", `\`, "a*b?c", "[!a-z]x", `a\*`, "*?*?*?", "$ssrun/*", "x[\\]]y"} {
		f.Add(s, "a*b?cx")
	}
	f.Fuzz(func(t *testing.T, src, key string) {
		p, err := Compile(src)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Compile(%q) = %v, not ErrInvalid", src, err)
			}
			return
		}
		if p.Match(key) && !strings.HasPrefix(key, p.Prefix()) {
			t.Fatalf("%q matches %q without the prefix %q", src, key, p.Prefix())
		}
		_ = p.Check("$ssrun/", []string{key})
	})
}
