package ocirules

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/ssrun/ssrun/internal/safefile"
)

// A mount is the folder the host loads for one reference, laid out as
// kubelet lays out a ConfigMap volume, so that the host's folder loading
// and hot reload (which follow a ConfigMap's "..data" swap) apply as they
// are:
//
//	DIR/..sha256-<hex>/          one version: the artifact's files, named by
//	                             the manifest digest (the cache key), with
//	DIR/..sha256-<hex>/..manifest  the manifest's bytes and, when verified,
//	DIR/..sha256-<hex>/..signature its signature
//	DIR/..data -> ..sha256-<hex>  the version shown: swapped in one rename
//	DIR/NAME -> ..data/NAME       each file, a link through ..data
//
// A new version is written and verified in a temporary folder
// (DIR/..tmp-*), renamed to its digest's name, then shown by the swap;
// the previous version's folder is removed after it. At start, the version
// ..data names is verified again (its manifest against the digest, each
// file against the manifest, the signature against the keys) before it is
// used: a restart without the registry runs the last version pulled.
//
// The names written are the manifest's file names, each checked by
// checkName (a plain name: never a path, never hidden), so nothing is
// written outside DIR.

const (
	dataLink     = "..data"
	versionPre   = "..sha256-"
	tmpPre       = "..tmp-"
	manifestFile = "..manifest"
	sigFile      = "..signature"
)

// mount is one reference's folder, locked for this process.
type mount struct {
	dir    string
	unlock func() error
}

// openMount makes and locks the folder of ref under cache.
func openMount(cache string, ref Ref) (*mount, error) {
	dir := filepath.Join(cache, ref.key())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rules cache: %w", err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return nil, fmt.Errorf("rules cache for %s: %w", ref, err)
	}
	return &mount{dir: dir, unlock: unlock}, nil
}

func (m *mount) close() error { return m.unlock() }

// versionDir is the folder of version d.
func (m *mount) versionDir(d digest.Digest) string {
	return filepath.Join(m.dir, versionPre+d.Encoded())
}

// current returns the version ..data names, if any.
func (m *mount) current() (digest.Digest, bool) {
	target, err := os.Readlink(filepath.Join(m.dir, dataLink))
	if err != nil {
		return "", false
	}
	hexPart, ok := strings.CutPrefix(target, versionPre)
	d := digest.NewDigestFromEncoded(digest.SHA256, hexPart)
	if !ok || checkDigest(d) != nil {
		return "", false
	}
	return d, true
}

// verify checks the version folder of d: its manifest hashes to d and
// parses within limits, each file has its layer's size and digest, and,
// with keys, its signature verifies. It returns the files.
func (m *mount) verify(d digest.Digest, limits Limits, keys []ed25519.PublicKey) ([]File, error) {
	vdir := m.versionDir(d)
	mb, err := safefile.Read(filepath.Join(vdir, manifestFile), limits.ManifestBytes)
	if err != nil {
		return nil, err
	}
	if digest.FromBytes(mb) != d {
		return nil, fmt.Errorf("%s: the manifest does not match its digest", vdir)
	}
	files, err := Parse(mb, limits)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := checkFile(filepath.Join(vdir, f.Name), f); err != nil {
			return nil, err
		}
	}
	if len(keys) > 0 {
		sig, err := safefile.Read(filepath.Join(vdir, sigFile), 1024)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnsigned, err)
		}
		if !verifySignature(keys, d, sig) {
			return nil, fmt.Errorf("%s: %w: the cached signature is not made by a trusted key", vdir, ErrUnsigned)
		}
	}
	return files, nil
}

// checkFile checks that the file at path has f's size and digest.
func checkFile(path string, f File) error {
	r, err := safefile.Open(path, f.Desc.Size)
	if err != nil {
		return err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if n != f.Desc.Size || "sha256:"+hex.EncodeToString(h.Sum(nil)) != f.Desc.Digest.String() {
		return fmt.Errorf("%s: does not match its digest %s (%d bytes)", path, f.Desc.Digest, f.Desc.Size)
	}
	return nil
}

// stage makes a temporary version folder; the caller fills it and
// commits it, or removes it.
func (m *mount) stage() (string, error) {
	tmp, err := os.MkdirTemp(m.dir, tmpPre)
	if err != nil {
		return "", fmt.Errorf("rules cache: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("rules cache: %w", err)
	}
	return tmp, nil
}

// inside returns the path of name in folder, refusing a name that is not
// a plain file name (checkName: Parse has refused it already; this is the
// last line).
func inside(folder, name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	p := filepath.Join(folder, name)
	if filepath.Dir(p) != filepath.Clean(folder) {
		return "", fmt.Errorf("file name %q leaves the folder", name)
	}
	return p, nil
}

// reuse copies the file f from the version shown now, if it has one with
// f's digest, into path; false when it has none.
func (m *mount) reuse(cur digest.Digest, curFiles []File, f File, path string) bool {
	for _, cf := range curFiles {
		if cf.Desc.Digest != f.Desc.Digest || cf.Desc.Size != f.Desc.Size {
			continue
		}
		src := filepath.Join(m.versionDir(cur), cf.Name)
		if checkFile(src, f) != nil {
			return false
		}
		in, err := safefile.Open(src, f.Desc.Size)
		if err != nil {
			return false
		}
		defer in.Close()
		return writeFrom(path, in) == nil && checkFile(path, f) == nil
	}
	return false
}

// writeFrom creates path (it must not exist) with r's content.
func writeFrom(path string, r io.Reader) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// writeNew creates path (it must not exist) with b.
func writeNew(path string, b []byte, mode os.FileMode) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := out.Write(b); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// commit renames the staged folder tmp to version d's folder, replacing
// a folder of that name left by an earlier run.
func (m *mount) commit(tmp string, d digest.Digest) error {
	vdir := m.versionDir(d)
	if err := os.RemoveAll(vdir); err != nil {
		return fmt.Errorf("rules cache: %w", err)
	}
	if err := os.Rename(tmp, vdir); err != nil {
		return fmt.Errorf("rules cache: %w", err)
	}
	return nil
}

// show makes version d, with files, the one the folder shows: the
// "..data" swap, a link for each file new in it, the links of files no
// longer in it removed, and the other versions' folders removed.
func (m *mount) show(d digest.Digest, files []File) error {
	tmpLink := filepath.Join(m.dir, dataLink+"_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(versionPre+d.Encoded(), tmpLink); err != nil {
		return fmt.Errorf("rules cache: %w", err)
	}
	if err := os.Rename(tmpLink, filepath.Join(m.dir, dataLink)); err != nil {
		return fmt.Errorf("rules cache: %w", err)
	}
	want := map[string]bool{}
	for _, f := range files {
		want[f.Name] = true
		link, err := inside(m.dir, f.Name)
		if err != nil {
			return err
		}
		target := filepath.Join(dataLink, f.Name)
		if t, err := os.Readlink(link); err == nil && t == target {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("rules cache: %w", err)
		}
	}
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return fmt.Errorf("rules cache: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == dataLink:
		case strings.HasPrefix(name, versionPre) || strings.HasPrefix(name, tmpPre):
			if name != versionPre+d.Encoded() {
				errs = append(errs, os.RemoveAll(filepath.Join(m.dir, name)))
			}
		case !want[name]:
			errs = append(errs, os.RemoveAll(filepath.Join(m.dir, name)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rules cache: removing what the new version dropped: %w", err)
	}
	return nil
}
