package ocirules

import (
	"strings"
	"testing"
)

// FuzzParseRef: an oci:// reference comes from the command line or a
// manifest. ParseRef never panics; a reference it accepts gives itself
// back through String (ParseRef reads it again to an equal Ref), and its
// cache key is one safe path element (it names a folder under the cache).
func FuzzParseRef(f *testing.F) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{
		"oci://127.0.0.1:5000/rules:v1",
		"oci://reg.example/a/b@" + d,
		"oci://reg.example/a/b:v2@" + d,
		"oci://[::1]:5000/rules:latest",
		"oci://myregistry.azurecr.io/ssrun/rules:3",
		"oci://localhost:5000/plant-a/rules:v3",
		"oci://reg.example/rules",
		"oci://rules:v1",
		"oci://reg.example/Rules:v1",
		"oci://reg.example/r@sha256:12",
		"oci://reg.example/r:bad tag",
		"oci://reg.example/r:../..",
		"oci://reg.example/r@sha512:" + strings.Repeat("ab", 64),
		"oci://reg.example/r:v1@" + d + "@" + d,
		"oci://localhost:5000@" + d,
		"oci://a/" + strings.Repeat("b/", 80) + "c:" + strings.Repeat("t", 128),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if r != (Ref{}) {
				t.Errorf("ParseRef(%q) = %+v with error %v, want the zero Ref", s, r, err)
			}
			return
		}
		if r.Registry == "" || r.Repository == "" || r.Tag == "" && r.Digest == "" {
			t.Errorf("ParseRef(%q) = %+v: registry, repository and a tag or digest wanted", s, r)
		}
		again, err := ParseRef(r.String())
		if err != nil {
			t.Fatalf("ParseRef(%q) = %+v, whose String %q ParseRef refuses: %v", s, r, r.String(), err)
		}
		if again != r {
			t.Errorf("ParseRef(%q) = %+v; its String %q parses to %+v", s, r, r.String(), again)
		}
		k := r.key()
		if k == "" || k == "." || k == ".." || strings.ContainsAny(k, "/\\\x00") || len(k) > 255 {
			t.Errorf("ParseRef(%q): cache key %q is not one safe path element", s, k)
		}
		if pinned := r.At(r.Digest); pinned != r {
			t.Errorf("%+v.At(its own digest) = %+v", r, pinned)
		}
	})
}
