// Package ocirules ships a rules folder as an OCI artifact: `ssrun push`
// packs it and pushes it to a container registry, and `ssrun run oci://REF`
// (dev, check, test) pulls it, verified, into a local folder that the host
// loads and follows like any rules folder.
//
// The artifact (docs/deploy.md has the user's version):
//
//   - an OCI image manifest (application/vnd.oci.image.manifest.v1+json)
//     with artifactType ArtifactType and the empty config
//     (application/vnd.oci.empty.v1+json, "{}"), as the OCI 1.1 guidance
//     for artifacts and `oras push` make it;
//   - one layer per file, in name order, each with its own media type
//     (MediaTypeLua, MediaTypeWasm, MediaTypeConfig, MediaTypeTest) and
//     its file name in the annotation org.opencontainers.image.title, so
//     `oras pull` writes the same folder. A flat folder: names are plain
//     file names, never paths;
//   - no timestamp: the same folder always packs to the same digest, so a
//     push of unchanged rules moves nothing.
//
// A pulled artifact is hostile input until checked (Parse): the manifest
// is bounded (Limits.ManifestBytes) and verified against its digest, its
// layers are counted (Limits.Files) and sized (Limits.FileBytes,
// Limits.TotalBytes) before anything is fetched, every file name is a plain
// name of a known kind, and every blob is verified against its digest and
// size while it is written into the cache (mount.go); nothing is written
// outside the cache folder.
//
// A signature (sign.go) is a second artifact whose subject is the rules
// manifest: an ed25519 signature over the manifest's digest.
package ocirules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types of the rules artifact.
const (
	// ArtifactType is the manifest's artifactType.
	ArtifactType = "application/vnd.ssrun.rules.v1"
	// MediaTypeLua is a Lua rule file (NAME.lua).
	MediaTypeLua = "application/vnd.ssrun.rule.lua.v1"
	// MediaTypeWasm is a WebAssembly rule file (NAME.wasm).
	MediaTypeWasm = "application/vnd.ssrun.rule.wasm.v1"
	// MediaTypeConfig is the folder's ssrun.yaml.
	MediaTypeConfig = "application/vnd.ssrun.config.v1+yaml"
	// MediaTypeTest is a test file of the rules (NAME.test.yaml, NAME_test.yaml).
	MediaTypeTest = "application/vnd.ssrun.test.v1+yaml"
)

// ConfigFile is the name of the rules folder's settings file.
const ConfigFile = "ssrun.yaml"

// Limits bound what a pull accepts. Zero fields take the defaults.
type Limits struct {
	ManifestBytes int64 // the manifest (and a signature's manifest)
	Files         int   // layers of one artifact
	FileBytes     int64 // one file
	TotalBytes    int64 // all files of one artifact
}

// Defaults of Limits.
const (
	DefaultManifestBytes = 1 << 20
	DefaultFiles         = 256
	DefaultFileBytes     = 64 << 20
	DefaultTotalBytes    = 256 << 20
)

func (l Limits) withDefaults() Limits {
	if l.ManifestBytes <= 0 {
		l.ManifestBytes = DefaultManifestBytes
	}
	if l.Files <= 0 {
		l.Files = DefaultFiles
	}
	if l.FileBytes <= 0 {
		l.FileBytes = DefaultFileBytes
	}
	if l.TotalBytes <= 0 {
		l.TotalBytes = DefaultTotalBytes
	}
	return l
}

// File is one file of a rules artifact: its name in the folder and its
// layer.
type File struct {
	Name string
	Desc ocispec.Descriptor
}

// mediaTypeOf returns the media type of the file name, or "" when such a
// file is not packed.
func mediaTypeOf(name string) string {
	switch {
	case name == ConfigFile:
		return MediaTypeConfig
	case strings.HasSuffix(name, ".lua"):
		return MediaTypeLua
	case strings.HasSuffix(name, ".wasm"):
		return MediaTypeWasm
	case isTestFile(name):
		return MediaTypeTest
	}
	return ""
}

// isTestFile is testrun.IsTestFile: NAME.test.yaml or NAME_test.yaml (.yml too).
func isTestFile(name string) bool {
	for _, ext := range []string{".yaml", ".yml"} {
		if base, ok := strings.CutSuffix(name, ext); ok {
			return strings.HasSuffix(base, ".test") || strings.HasSuffix(base, "_test")
		}
	}
	return false
}

// maxNameBytes bounds a file name (most file systems allow 255 bytes).
const maxNameBytes = 255

// checkName refuses a file name that is not a plain name of the folder:
// empty, too long, a path (/ or \), hidden or special (leading '.': "..",
// "..data", the mount's own names), or holding anything but ASCII letters,
// digits, '.', '_' and '-'.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty file name")
	case len(name) > maxNameBytes:
		return fmt.Errorf("file name of %d bytes, over %d", len(name), maxNameBytes)
	case name[0] == '.':
		return fmt.Errorf("file name %q starts with '.': not a rule file (and never a path)", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("file name %q: byte %q at %d is not a letter, digit, '.', '_' or '-' (a rules artifact is one flat folder)", name, c, i)
		}
	}
	return nil
}

// emptyConfig is the OCI empty descriptor's content.
var emptyConfig = []byte("{}")

// Parse checks the manifest of a rules artifact, as a registry served it,
// against the format and limits, and returns its files in manifest order.
// It never trusts the manifest: every error says what is wrong with it.
func Parse(manifest []byte, limits Limits) ([]File, error) {
	limits = limits.withDefaults()
	if int64(len(manifest)) > limits.ManifestBytes {
		return nil, fmt.Errorf("manifest of %d bytes, over the limit of %d", len(manifest), limits.ManifestBytes)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	switch {
	case m.SchemaVersion != 2:
		return nil, fmt.Errorf("manifest schemaVersion %d, want 2", m.SchemaVersion)
	case m.MediaType != ocispec.MediaTypeImageManifest:
		return nil, fmt.Errorf("manifest mediaType %q, want %s", m.MediaType, ocispec.MediaTypeImageManifest)
	case m.ArtifactType != ArtifactType:
		return nil, fmt.Errorf("artifactType %q: not an ssrun rules artifact (want %s; push one with ssrun push)", m.ArtifactType, ArtifactType)
	case m.Config.MediaType != ocispec.MediaTypeEmptyJSON:
		return nil, fmt.Errorf("config mediaType %q, want %s", m.Config.MediaType, ocispec.MediaTypeEmptyJSON)
	case m.Config.Size > int64(len(emptyConfig)) || m.Config.Size < 0:
		return nil, fmt.Errorf("config of %d bytes: the empty config is %d", m.Config.Size, len(emptyConfig))
	case len(m.Layers) == 0:
		return nil, errors.New("no files in the artifact")
	case len(m.Layers) > limits.Files:
		return nil, fmt.Errorf("%d files, over the limit of %d", len(m.Layers), limits.Files)
	}
	files := make([]File, 0, len(m.Layers))
	seen := make(map[string]bool, len(m.Layers))
	var total int64
	for i, l := range m.Layers {
		name := l.Annotations[ocispec.AnnotationTitle]
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("layer %d: %s twice", i, name)
		}
		seen[name] = true
		if want := mediaTypeOf(name); l.MediaType != want || want == "" {
			return nil, fmt.Errorf("layer %d (%s): mediaType %q, want %q for that name", i, name, l.MediaType, want)
		}
		if err := checkDigest(l.Digest); err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, name, err)
		}
		if l.Size < 0 || l.Size > limits.FileBytes {
			return nil, fmt.Errorf("layer %d (%s): %d bytes, over the limit of %d per file", i, name, l.Size, limits.FileBytes)
		}
		if total += l.Size; total > limits.TotalBytes {
			return nil, fmt.Errorf("layer %d (%s): the files add up to over the limit of %d bytes", i, name, limits.TotalBytes)
		}
		if len(l.URLs) != 0 {
			return nil, fmt.Errorf("layer %d (%s): foreign URLs are not fetched", i, name)
		}
		files = append(files, File{Name: name, Desc: l})
	}
	return files, nil
}

// checkDigest accepts a well-formed SHA-256 digest only: the one algorithm
// every registry computes.
func checkDigest(d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("digest %q: %w", d, err)
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("digest %q: only sha256 is accepted", d)
	}
	return nil
}

// manifestOf builds the manifest of files (in name order), deterministic:
// no timestamp, so that the same folder gives the same digest.
func manifestOf(files []File) ([]byte, error) {
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       ocispec.DescriptorEmptyJSON,
	}
	m.SchemaVersion = 2
	for _, f := range files {
		d := f.Desc
		d.Annotations = map[string]string{ocispec.AnnotationTitle: f.Name}
		m.Layers = append(m.Layers, d)
	}
	return json.Marshal(m)
}
