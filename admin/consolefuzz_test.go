package admin

import (
	"net"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzStreamFilter: any query parses to a bounded filter or an error, and
// matching any key with it neither panics nor hangs.
func FuzzStreamFilter(f *testing.F) {
	for _, s := range [][2]string{{"sensors/**", "sensors/a/b"}, {"a/*/c", "a/b/c"}, {"[", "x"}, {"**/**/**/**", strings.Repeat("a/", 100)}, {"{a,b}", "a"}, {"<script>", "<script>"},
		{"a\x00b/**", "a\x00b/c"}, {"\xff\xfe*", "\xff\xfe"}, {strings.Repeat("*", 9), "x"}, {strings.Repeat("k", MaxFilter+1), "k"}} {
		f.Add(s[0], "door.lua", s[1])
	}
	f.Fuzz(func(t *testing.T, key, rule, probe string) {
		r := httptest.NewRequest("GET", "/console/api/stream?"+url.Values{"key": {key}, "rule": {rule}}.Encode(), nil)
		flt, err := parseFilter(r)
		if err != nil {
			return
		}
		if len(flt.key) > MaxFilter || len(flt.rule) > MaxFilter || strings.Count(flt.key, "*") > 8 {
			t.Fatalf("filter %+v passed its bounds", flt)
		}
		e := Entry{Key: probe, Rule: rule}
		if !flt.match(e) && key == "" {
			t.Fatalf("an empty key filter refused %q", probe)
		}
		if flt.match(Entry{Key: probe, Rule: rule + "x"}) && rule != "" {
			t.Fatalf("rule filter %q took rule %q", rule, rule+"x")
		}
	})
}

// FuzzSafeNext: the page a login goes back to is always a path of this
// server.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/", "/#/why?key=a", "//evil.example/", "/\\evil.example", "https://evil.example", "/\r\nSet-Cookie: x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\r\n\t") {
			t.Fatalf("safeNext(%q) = %q", next, got)
		}
		if u, err := url.Parse(got); err == nil && (u.Host != "" || u.Scheme != "") {
			t.Fatalf("safeNext(%q) = %q leaves the server", next, got)
		}
	})
}

// FuzzParseOTLPEndpoint: an accepted endpoint is a host and port, and
// parsing never panics.
func FuzzParseOTLPEndpoint(f *testing.F) {
	for _, s := range []string{"127.0.0.1:4318", "http://[::1]:4318", "https://c:4318/", "http://x", "ftp://x:1", "http://u@x:1", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hp, _, err := ParseOTLPEndpoint(s)
		if err != nil {
			return
		}
		if host, port, err := net.SplitHostPort(hp); err != nil || host == "" || port == "" {
			t.Fatalf("%q accepted as %q", s, hp)
		}
	})
}

// FuzzLocalName: a Host header the endpoint on loopback answers is one a
// URL of an IP address or of localhost (or a name under .localhost) has,
// never another name (DNS rebinding).
func FuzzLocalName(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9310", "[::1]:9310", "localhost", "LOCALHOST.:1", "a.localhost:1", "evil.example:9310",
		"localhost.evil.example", "127.0.0.1.nip.io", "localhost:80.evil.example", "[fe80::1%25eth0]:1", "", ":1", "[]:1", "0x7f.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !localName(host) || host == "" {
			return
		}
		u, err := url.Parse("http://" + host + "/")
		if err != nil {
			t.Fatalf("localName(%q) accepted what is no URL's host: %v", host, err)
		}
		name := u.Hostname()
		if _, err := netip.ParseAddr(name); err == nil {
			return
		}
		if name = strings.TrimSuffix(strings.ToLower(name), "."); name != "localhost" && !strings.HasSuffix(name, ".localhost") {
			t.Fatalf("localName(%q) accepted the name %q", host, name)
		}
	})
}
