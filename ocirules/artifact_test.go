package ocirules_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/ocirules"
)

// Parse never fails open: whatever the manifest, it returns files only
// when each is a plain name of a known kind, within the limits, with a
// sha256 digest; otherwise an error. It never panics.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.ssrun.rules.v1","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[{"mediaType":"application/vnd.ssrun.rule.lua.v1","digest":"sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","size":3,"annotations":{"org.opencontainers.image.title":"a.lua"}}]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.ssrun.rules.v1","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[{"mediaType":"application/vnd.ssrun.rule.lua.v1","digest":"sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","size":3,"annotations":{"org.opencontainers.image.title":"../a.lua"}}]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.ssrun.rules.v1","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[{"mediaType":"application/vnd.ssrun.config.v1+yaml","digest":"sha512:cd","size":-1,"annotations":{"org.opencontainers.image.title":"ssrun.yaml"}}]}`,
		`{"schemaVersion":1}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	limits := ocirules.Limits{Files: 4, FileBytes: 1 << 10, TotalBytes: 2 << 10}
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := ocirules.Parse(b, limits)
		if err != nil {
			if files != nil {
				t.Fatalf("files %v with error %v", files, err)
			}
			return
		}
		if len(files) == 0 || len(files) > limits.Files {
			t.Fatalf("%d files accepted", len(files))
		}
		var total int64
		for _, f := range files {
			if f.Name == "" || strings.ContainsAny(f.Name, `/\`) || strings.HasPrefix(f.Name, ".") || filepath.Base(f.Name) != f.Name {
				t.Fatalf("name %q accepted", f.Name)
			}
			if f.Desc.Size < 0 || f.Desc.Size > limits.FileBytes || f.Desc.Digest.Validate() != nil {
				t.Fatalf("layer %+v accepted", f.Desc)
			}
			total += f.Desc.Size
		}
		if total > limits.TotalBytes {
			t.Fatalf("%d bytes accepted", total)
		}
	})
}

// ParseRef takes oci://REGISTRY/REPO with a tag, a digest or both, and
// refuses the rest with the reference in the error.
func TestParseRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for in, want := range map[string]string{
		"oci://127.0.0.1:5000/rules:v1":             "oci://127.0.0.1:5000/rules:v1",
		"oci://reg.example/a/b@" + d:                "oci://reg.example/a/b@" + d,
		"oci://reg.example/a/b:v2@" + d:             "oci://reg.example/a/b:v2@" + d,
		"oci://[::1]:5000/rules:latest":             "oci://[::1]:5000/rules:latest",
		"oci://myregistry.azurecr.io/ssrun/rules:3": "oci://myregistry.azurecr.io/ssrun/rules:3",
	} {
		r, err := ocirules.ParseRef(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRef(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"reg.example/rules:v1", "oci://reg.example/rules", "oci://rules:v1", "oci://reg.example/Rules:v1", "oci://reg.example/r@sha256:12", "oci://reg.example/r:bad tag"} {
		if _, err := ocirules.ParseRef(in); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseRef(%q): %v, want an error naming it", in, err)
		}
	}
}

// Pack takes rule files, ssrun.yaml and test files, skips the rest, packs
// a project's rules/ folder when the project has no rule file of its own,
// and refuses a native plugin and an empty folder.
func TestPack(t *testing.T) {
	p, err := ocirules.Pack(writeDir(t, rulesV1), ocirules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range p.Files {
		names = append(names, f.Name)
	}
	if strings.Join(names, " ") != "copy.lua copy.test.yaml ssrun.yaml" || strings.Join(p.Skipped, " ") != "README.md" {
		t.Fatalf("packed %v, skipped %v", names, p.Skipped)
	}

	proj := writeDir(t, map[string]string{"main.go": "package main", "README.md": "x"})
	if err := os.Mkdir(filepath.Join(proj, "rules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "rules", "thermostat.wasm"), []byte("\x00asm"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = ocirules.Pack(proj, ocirules.Limits{})
	if err != nil || p.Dir != filepath.Join(proj, "rules") || len(p.Files) != 1 || p.Files[0].Desc.MediaType != ocirules.MediaTypeWasm {
		t.Fatalf("project: %+v, %v", p, err)
	}

	plug := writeDir(t, map[string]string{"a.lua": luaRule})
	if err := os.WriteFile(filepath.Join(plug, "summary"), []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ocirules.Pack(plug, ocirules.Limits{}); !errors.Is(err, ocirules.ErrPlugin) || !strings.Contains(err.Error(), "summary") {
		t.Fatalf("a plugin: %v", err)
	}
	empty := writeDir(t, map[string]string{"README.md": "x"})
	_, err = ocirules.Pack(empty, ocirules.Limits{})
	wantErr(t, err, empty, "no rule files")
	_, err = ocirules.Pack(writeDir(t, map[string]string{"big.lua": strings.Repeat("x", 2000)}), ocirules.Limits{FileBytes: 1000})
	wantErr(t, err, "big.lua")
}
