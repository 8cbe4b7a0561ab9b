package ocirules

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ssrun/ssrun/internal/safefile"
)

// Packed is a rules folder read for a push.
type Packed struct {
	Dir     string   // the folder packed: DIR, or DIR/rules for a project
	Files   []File   // in name order
	Skipped []string // files of the folder that are not packed (README.md, sources)
	content map[string][]byte
}

// Bytes is the size of the files.
func (p *Packed) Bytes() int64 {
	var n int64
	for _, f := range p.Files {
		n += f.Desc.Size
	}
	return n
}

// ErrPlugin is wrapped by the error of Pack for a folder with a native
// plugin.
var ErrPlugin = errors.New("a native plugin cannot be shipped in a rules artifact")

// Pack reads the folder to push: its rule files (*.lua, *.wasm), its
// ssrun.yaml and its test files (NAME.test.yaml, NAME_test.yaml). A folder
// with none of them whose rules/ folder has some (the project layout
// `ssrun new` writes and the examples build into) packs rules/. Other files
// are skipped and listed. A native plugin (an executable without an
// extension) is refused: it is built for one platform, so it belongs in
// the container image.
func Pack(dir string, limits Limits) (*Packed, error) {
	limits = limits.withDefaults()
	p, err := pack(dir, limits)
	if err != nil {
		return nil, err
	}
	if len(p.Files) == 0 {
		sub := filepath.Join(dir, "rules")
		if info, serr := os.Stat(sub); serr == nil && info.IsDir() {
			if q, err := pack(sub, limits); err != nil || len(q.Files) > 0 {
				return q, err
			}
		}
		return nil, fmt.Errorf("%s: no rule files to push (*.lua, *.wasm, ssrun.yaml, NAME.test.yaml; a Go or AssemblyScript rule is pushed once built, e.g. into %s)", dir, sub)
	}
	return p, nil
}

func pack(dir string, limits Limits) (*Packed, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rules folder: %w", err)
	}
	p := &Packed{Dir: dir, content: map[string][]byte{}}
	var total int64
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		info, err := os.Stat(path) // through links, as the host loads them
		if err != nil || info.IsDir() || name[0] == '.' {
			continue
		}
		mt := mediaTypeOf(name)
		if mt == "" {
			if info.Mode().IsRegular() && filepath.Ext(name) == "" && info.Mode().Perm()&0o111 != 0 {
				return nil, fmt.Errorf("%s: %w (it is built for one platform): build it into the container image and name it under plugins: in ssrun.yaml (docs/deploy.md)", path, ErrPlugin)
			}
			p.Skipped = append(p.Skipped, name)
			continue
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(p.Files) == limits.Files {
			return nil, fmt.Errorf("%s: more than %d files to push", dir, limits.Files)
		}
		b, err := safefile.Read(path, limits.FileBytes)
		if err != nil {
			return nil, fmt.Errorf("push: %w", err)
		}
		if total += int64(len(b)); total > limits.TotalBytes {
			return nil, fmt.Errorf("%s: the files add up to over %d bytes", dir, limits.TotalBytes)
		}
		p.Files = append(p.Files, File{Name: name, Desc: content.NewDescriptorFromBytes(mt, b)})
		p.content[name] = b
	}
	sort.Slice(p.Files, func(i, j int) bool { return p.Files[i].Name < p.Files[j].Name })
	return p, nil
}

// Pushed says what a push made.
type Pushed struct {
	Ref      Ref // pinned to the manifest's digest
	Manifest ocispec.Descriptor
	Signed   bool
}

// Push pushes p to ref, which must name a tag: each file a blob (unless
// the registry has it), then the manifest under the tag, then, with key,
// a signature of it.
func (c *Client) Push(ctx context.Context, p *Packed, ref Ref, key ed25519.PrivateKey) (Pushed, error) {
	if ref.Tag == "" || ref.Digest != "" {
		return Pushed{}, fmt.Errorf("push to %s: name a tag only (REGISTRY/REPOSITORY:TAG); the digest is printed once pushed", ref)
	}
	repo, err := c.repo(ref)
	if err != nil {
		return Pushed{}, err
	}
	for _, f := range p.Files {
		if err := pushBlob(ctx, repo, f.Desc, bytes.NewReader(p.content[f.Name])); err != nil {
			return Pushed{}, fmt.Errorf("push %s to %s: %w", f.Name, ref, err)
		}
	}
	if err := pushBlob(ctx, repo, ocispec.DescriptorEmptyJSON, bytes.NewReader(emptyConfig)); err != nil {
		return Pushed{}, fmt.Errorf("push to %s: config: %w", ref, err)
	}
	m, err := manifestOf(p.Files)
	if err != nil {
		return Pushed{}, err
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, m)
	if key != nil { // signed before it is tagged: a follower never sees it unsigned
		if err := repo.Manifests().Push(ctx, desc, bytes.NewReader(m)); err != nil {
			return Pushed{}, fmt.Errorf("push manifest to %s: %w", ref, err)
		}
		if err := pushSignature(ctx, repo, desc, key); err != nil {
			return Pushed{}, fmt.Errorf("sign %s: %w", ref.At(desc.Digest), err)
		}
	}
	if err := repo.PushReference(ctx, desc, bytes.NewReader(m), ref.Tag); err != nil {
		return Pushed{}, fmt.Errorf("push manifest to %s: %w", ref, err)
	}
	return Pushed{Ref: ref.At(desc.Digest), Manifest: desc, Signed: key != nil}, nil
}
