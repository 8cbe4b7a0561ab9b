package ocirules_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"oras.land/oras-go/v2/content"

	"github.com/ssrun/ssrun/ocirules"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

// A folder pushed to a tag is pulled by the tag and by the digest push
// printed into a folder laid out as a ConfigMap volume (files as links
// through ..data): the rule files, ssrun.yaml and test files, not the
// README. Pushing the same folder again gives the same digest.
func TestPushPullByTagAndDigest(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	c := client(t, reg, ocirules.Options{})
	dir := writeDir(t, rulesV1)
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:v1")
	pushed := push(t, c, dir, tag, nil)
	if !strings.HasPrefix(pushed.Ref.String(), "oci://"+reg.Host+"/rules/plant:v1@sha256:") {
		t.Fatalf("pushed %s", pushed.Ref)
	}
	if again := push(t, c, dir, tag, nil); again.Ref != pushed.Ref {
		t.Fatalf("the same folder pushed twice: %s then %s", pushed.Ref, again.Ref)
	}

	byTag, err := open(t, c, tag, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, readDir(t, byTag.Dir()), packed(rulesV1))
	if byTag.Running() != pushed.Ref {
		t.Fatalf("running %s, want %s", byTag.Running(), pushed.Ref)
	}
	link, err := os.Readlink(filepath.Join(byTag.Dir(), "copy.lua"))
	if err != nil || link != filepath.Join("..data", "copy.lua") {
		t.Fatalf("copy.lua is %q (%v), want a link through ..data", link, err)
	}

	byDigest, err := open(t, c, ref(t, "oci://"+reg.Host+"/rules/plant@"+pushed.Manifest.Digest.String()), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, readDir(t, byDigest.Dir()), packed(rulesV1))
}

// When the tag moves, Pull shows the new version in one swap of ..data:
// a changed file changes, a new one appears, a dropped one goes, the old
// version's folder is removed, and only the changed files are fetched
// (ssrun.yaml, unchanged, is copied from the running version). A pull
// with the tag unchanged fetches nothing but the tag's digest.
func TestTagMovedShowsTheNewVersion(t *testing.T) {
	reg, c, tag, v1 := pushedV1(t, ocirules.Options{})
	s, err := open(t, c, tag, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	blobs := reg.Count("GET", "/blobs/")
	if changed, err := s.Pull(ctxOf(t)); err != nil || changed {
		t.Fatalf("pull of an unchanged tag: changed %v, %v", changed, err)
	}
	if n := reg.Count("GET", "/blobs/"); n != blobs {
		t.Fatalf("a pull of an unchanged tag fetched %d blobs", n-blobs)
	}

	v2 := push(t, c, writeDir(t, rulesV2), tag, nil)
	changed, err := s.Pull(ctxOf(t))
	if err != nil || !changed {
		t.Fatalf("pull after the tag moved: changed %v, %v", changed, err)
	}
	sameFiles(t, readDir(t, s.Dir()), rulesV2)
	if s.Running() != v2.Ref {
		t.Fatalf("running %s, want %s", s.Running(), v2.Ref)
	}
	if n := reg.Count("GET", "/blobs/") - blobs; n != 2 {
		t.Errorf("%d blobs fetched for v2, want 2 (copy.lua and more.lua; ssrun.yaml is unchanged)", n)
	}
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if strings.Contains(e.Name(), v1.Manifest.Digest.Encoded()) || strings.HasPrefix(e.Name(), "..tmp-") {
			t.Errorf("%s left in the folder after the swap", e.Name())
		}
	}
}

// A registry that is down (a closed loopback port) at start: the last
// version pulled for the reference runs from the cache, with a warning; a
// reference never pulled fails, saying so. A reference pinned by digest
// and cached is not even asked for.
func TestRegistryDownRunsTheCachedVersion(t *testing.T) {
	log, lines := logs()
	reg, c, tag, pushed := pushedV1(t, ocirules.Options{Logger: log})
	cache := t.TempDir()
	for _, r := range []ocirules.Ref{tag, pushed.Ref} {
		s, err := c.Open(ctxOf(t), r, cache)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	served := len(reg.Requests())
	pinned, err := open(t, c, pushed.Ref, cache)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reg.Requests()) - served; n != 0 {
		t.Errorf("opening a cached pinned reference asked the registry %d times", n)
	}
	sameFiles(t, readDir(t, pinned.Dir()), packed(rulesV1))

	reg.Close()
	s, err := open(t, c, tag, cache)
	if err != nil {
		t.Fatalf("registry down, cache full: %v", err)
	}
	sameFiles(t, readDir(t, s.Dir()), packed(rulesV1))
	if s.Running() != pushed.Ref {
		t.Fatalf("running %s, want %s", s.Running(), pushed.Ref)
	}
	if !strings.Contains(lines.String(), "running the version in the cache") || !strings.Contains(lines.String(), "connection refused") {
		t.Errorf("no warning naming the cached version and the pull's error:\n%s", lines)
	}
	_, err = open(t, c, ref(t, "oci://"+reg.Host+"/rules/other:live"), cache)
	wantErr(t, err, "rules/other:live", "connection refused", "has no version of it")
}

// A cached version whose file was changed on disk is refused at start,
// not run.
func TestCachedVersionIsVerifiedAgain(t *testing.T) {
	reg, c, tag, _ := pushedV1(t, ocirules.Options{})
	cache := t.TempDir()
	s, err := c.Open(ctxOf(t), tag, cache)
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	target, err := filepath.EvalSymlinks(filepath.Join(dir, "copy.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("os.exit(1)"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	_, err = open(t, c, tag, cache)
	wantErr(t, err, "connection refused", "cache's version was refused", "copy.lua: does not match its digest")
}

// Two sources on one cache folder would swap it under each other: the
// second is refused.
func TestOneSourcePerCacheFolder(t *testing.T) {
	_, c, tag, _ := pushedV1(t, ocirules.Options{})
	cache := t.TempDir()
	if _, err := open(t, c, tag, cache); err != nil {
		t.Fatal(err)
	}
	_, err := open(t, c, tag, cache)
	wantErr(t, err, "is locked", "--oci-cache")
}

// rewrite returns a registry wrapper that replaces the body of the
// responses to the requests match selects by edit's, the headers kept
// (Content-Length set to the new body's).
func rewrite(match func(*http.Request) bool, edit func(b []byte) []byte) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !match(r) {
				next.ServeHTTP(w, r)
				return
			}
			rec := &recorder{header: http.Header{}}
			next.ServeHTTP(rec, r)
			body := edit(rec.body)
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.WriteHeader(rec.code)
			_, _ = w.Write(body)
		})
	}
}

// blobTamper returns a registry wrapper that changes the response to a GET
// of the blob with digest d by edit.
func blobTamper(d string, edit func(b []byte) []byte) func(http.Handler) http.Handler {
	return rewrite(func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d)
	}, edit)
}

type recorder struct {
	header http.Header
	code   int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(c int)   { r.code = c }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body = append(r.body, b...)
	return len(b), nil
}

// A registry that sends other bytes than a blob's digest, or more bytes
// than its size, is refused with an error naming the file and what was
// wrong; nothing of that version is shown, and the folder keeps the
// version it had.
func TestTamperedBlobIsRefused(t *testing.T) {
	p, err := ocirules.Pack(writeDir(t, rulesV2), ocirules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var lua string
	for _, f := range p.Files {
		if f.Name == "more.lua" {
			lua = f.Desc.Digest.String()
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func([]byte) []byte
		words []string
	}{
		{"flipped byte", func(b []byte) []byte { b = slices.Clone(b); b[0] ^= 1; return b }, []string{"more.lua", "do not match the digest"}},
		{"more bytes", func(b []byte) []byte { return append(slices.Clone(b), "-- and more"...) }, []string{"more.lua", "Content-Length"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := ocitest.Start(t, ocitest.Options{Wrap: blobTamper(lua, tc.edit)})
			c := client(t, reg, ocirules.Options{})
			tag := ref(t, "oci://"+reg.Host+"/rules/plant:live")
			v1 := push(t, c, writeDir(t, rulesV1), tag, nil)
			s, err := open(t, c, tag, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Push(ctxOf(t), p, tag, nil); err != nil {
				t.Fatal(err)
			}
			_, err = s.Pull(ctxOf(t))
			wantErr(t, err, tc.words...)
			if s.Running() != v1.Ref {
				t.Fatalf("running %s after a refused pull, want %s", s.Running(), v1.Ref)
			}
			sameFiles(t, readDir(t, s.Dir()), packed(rulesV1))
			entries, _ := os.ReadDir(s.Dir())
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "..tmp-") {
					t.Errorf("staging folder %s left behind", e.Name())
				}
			}
		})
	}
}

// A registry that sends a blob without a length and does not stop (here
// 16 MiB past a file of a few hundred bytes) is refused once one byte
// more than the file's size has come, and nothing of it is kept.
func TestEndlessBlobIsRefused(t *testing.T) {
	p, err := ocirules.Pack(writeDir(t, map[string]string{"big.lua": luaRule}), ocirules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Files[0].Desc.Digest.String()
	reg := ocitest.Start(t, ocitest.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+d) {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Docker-Content-Digest", d)
			w.WriteHeader(http.StatusOK)
			chunk := []byte(strings.Repeat("-- more\n", 8192))
			for n := 0; n < 16<<20; n += len(chunk) { // bounded: the test stops by itself
				if _, err := w.Write(chunk); err != nil {
					return // the client hung up
				}
				w.(http.Flusher).Flush()
			}
		})
	}})
	c := client(t, reg, ocirules.Options{})
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:live")
	if _, err := c.Push(ctxOf(t), p, tag, nil); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	_, err = open(t, c, tag, cache)
	wantErr(t, err, "big.lua", "more bytes than the size")
	if m, _ := filepath.Glob(filepath.Join(cache, "*", "..*", "big.lua")); len(m) != 0 {
		t.Fatalf("kept: %v", m)
	}
}

// A registry that answers a tag with a manifest other than the digest it
// claims is refused.
func TestManifestThatLiesAboutItsDigestIsRefused(t *testing.T) {
	var other []byte
	reg := ocitest.Start(t, ocitest.Options{Wrap: rewrite(func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") && other != nil
	}, func([]byte) []byte { return other })}) // the digest header still names the real one
	c := client(t, reg, ocirules.Options{})
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:live")
	push(t, c, writeDir(t, rulesV1), tag, nil)
	// Another valid manifest of the same length: a rule renamed.
	p, err := ocirules.Pack(writeDir(t, map[string]string{"copz.lua": luaRule, "ssrun.yaml": rulesV1["ssrun.yaml"], "copz.test.yaml": rulesV1["copy.test.yaml"]}), ocirules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	tmp := ocitest.Start(t, ocitest.Options{})
	pushed, err := client(t, tmp, ocirules.Options{}).Push(ctxOf(t), p, ref(t, "oci://"+tmp.Host+"/x:y"), nil)
	if err != nil {
		t.Fatal(err)
	}
	other = fetchManifest(t, tmp, "x", pushed.Manifest.Digest.String())
	_, err = open(t, c, tag, t.TempDir())
	wantErr(t, err, "rules/plant:live", "manifest")
	if !errors.Is(err, content.ErrMismatchedDigest) {
		t.Fatalf("error %v: want a digest mismatch", err)
	}
}

func fetchManifest(t *testing.T, reg *ocitest.Registry, repo, d string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+reg.Host+"/v2/"+repo+"/manifests/"+d, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET manifest: %s %v", resp.Status, err)
	}
	return b
}

// putManifest stores manifest m under tag in reg, as a registry would
// serve it whatever it says.
func putManifest(t *testing.T, reg *ocitest.Registry, repo, tag string, m []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+reg.Host+"/v2/"+repo+"/manifests/"+tag, strings.NewReader(string(m)))
	req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT manifest: %s", resp.Status)
	}
}

// A layer over the size limit is refused before any blob is fetched,
// whether the limit is small or the registry claims 10 GiB.
func TestOversizedLayerIsRefused(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	c := client(t, reg, ocirules.Options{})
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:live")
	push(t, c, writeDir(t, map[string]string{"big.lua": strings.Repeat("-- padding\n", 200)}), tag, nil)
	small := client(t, reg, ocirules.Options{Limits: ocirules.Limits{FileBytes: 1000}})
	_, err := open(t, small, tag, t.TempDir())
	wantErr(t, err, "big.lua", "2200 bytes, over the limit of 1000 per file")

	huge := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":%q,`+
		`"config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},`+
		`"layers":[{"mediaType":%q,"digest":"sha256:%s","size":10737418240,"annotations":{"org.opencontainers.image.title":"huge.wasm"}}]}`,
		ocirules.ArtifactType, ocirules.MediaTypeWasm, strings.Repeat("ab", 32))
	putManifest(t, reg, "rules/plant", "huge", []byte(huge))
	blobs := reg.Count("GET", "/blobs/")
	_, err = open(t, c, ref(t, "oci://"+reg.Host+"/rules/plant:huge"), t.TempDir())
	wantErr(t, err, "huge.wasm", "10737418240 bytes, over the limit")
	if n := reg.Count("GET", "/blobs/") - blobs; n != 0 {
		t.Fatalf("%d blobs fetched for a refused manifest", n)
	}
}

// A manifest whose file names are paths, hidden or special is refused
// before anything is written: nothing appears outside the cache folder.
func TestHostileFileNamesAreRefused(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	c := client(t, reg, ocirules.Options{})
	for _, name := range []string{"../escape.lua", "/etc/passwd.lua", "..data", ".hidden.lua", "a/b.lua", `a\b.lua`, "x.sh"} {
		m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":%q,`+
			`"config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},`+
			`"layers":[{"mediaType":%q,"digest":"sha256:%s","size":3,"annotations":{"org.opencontainers.image.title":%q}}]}`,
			ocirules.ArtifactType, ocirules.MediaTypeLua, strings.Repeat("cd", 32), name)
		putManifest(t, reg, "rules/evil", "v1", []byte(m))
		root := t.TempDir()
		cache := filepath.Join(root, "cache")
		_, err := open(t, c, ref(t, "oci://"+reg.Host+"/rules/evil:v1"), cache)
		wantErr(t, err, "layer 0")
		var found []string
		_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && !strings.HasSuffix(p, ".lock") {
				found = append(found, p)
			}
			return nil
		})
		if len(found) != 0 {
			t.Errorf("%q: files written: %v", name, found)
		}
	}
}

// TLS is the default: a registry with a certificate the client does not
// trust is refused; its CA (--registry-ca-file) makes it work; a plain
// HTTP client is not let in either.
func TestTLSByDefault(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true})
	trusting := client(t, reg, ocirules.Options{CAFile: reg.CAFile})
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:v1")
	push(t, trusting, writeDir(t, rulesV1), tag, nil)
	if _, err := open(t, trusting, tag, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	untrusting, err := ocirules.New(ocirules.Options{RegistryConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = open(t, untrusting, tag, t.TempDir())
	wantErr(t, err, "certificate")
}

// Credentials come from a Docker config file (a pull secret's
// .dockerconfigjson has the same shape): without them the pull fails
// saying how to give them, with them it works.
func TestRegistryCredentialsFromDockerConfig(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{User: "puller", Password: "s3cret"})
	cfg := filepath.Join(t.TempDir(), ".dockerconfigjson")
	auth := base64.StdEncoding.EncodeToString([]byte("puller:s3cret"))
	if err := os.WriteFile(cfg, []byte(`{"auths":{"`+reg.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := client(t, reg, ocirules.Options{RegistryConfig: cfg})
	tag := ref(t, "oci://"+reg.Host+"/rules/plant:v1")
	push(t, c, writeDir(t, rulesV1), tag, nil)
	if _, err := open(t, c, tag, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	_, err := open(t, client(t, reg, ocirules.Options{}), tag, t.TempDir())
	wantErr(t, err, "credential not found", "--registry-config")
}
