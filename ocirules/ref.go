package ocirules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"
)

// Scheme starts a rules reference where a rules folder is expected:
// `ssrun run oci://registry.example/rules/plant-a:v3`.
const Scheme = "oci://"

// IsRef says whether a rules argument names an OCI artifact (oci://...)
// rather than a folder.
func IsRef(arg string) bool { return strings.HasPrefix(arg, Scheme) }

// Ref is a parsed rules reference: REGISTRY/REPOSITORY and a tag, a digest,
// or both (TAG@DIGEST: the digest is what is pulled, the tag is kept to
// name it).
type Ref struct {
	Registry   string
	Repository string
	Tag        string
	Digest     digest.Digest
}

// ParseRef parses oci://REGISTRY/REPOSITORY:TAG, oci://REGISTRY/REPOSITORY@sha256:HEX
// or oci://REGISTRY/REPOSITORY:TAG@sha256:HEX.
func ParseRef(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Ref{}, fmt.Errorf("rules reference %q: want %sREGISTRY/REPOSITORY:TAG or @sha256:DIGEST", s, Scheme)
	}
	var r Ref
	if before, after, ok := strings.Cut(rest, "@"); ok {
		r.Digest = digest.Digest(after)
		if err := checkDigest(r.Digest); err != nil {
			return Ref{}, fmt.Errorf("rules reference %q: %w", s, err)
		}
		rest = before
	}
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		r.Tag = rest[i+1:]
		rest = rest[:i]
	}
	parsed, err := registry.ParseReference(rest)
	if err == nil && r.Tag != "" {
		parsed.Reference = r.Tag
		err = parsed.ValidateReferenceAsTag()
	}
	if err != nil {
		return Ref{}, fmt.Errorf("rules reference %q: %w", s, err)
	}
	if r.Tag == "" && r.Digest == "" {
		return Ref{}, fmt.Errorf("rules reference %q: name a tag (:TAG) or a digest (@sha256:...)", s)
	}
	r.Registry, r.Repository = parsed.Registry, parsed.Repository
	return r, nil
}

// String is the reference as ParseRef reads it.
func (r Ref) String() string {
	s := Scheme + r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest.String()
	}
	return s
}

// Pinned says whether the reference names its content by digest: its
// content never changes, and once cached it needs no registry.
func (r Ref) Pinned() bool { return r.Digest != "" }

// reference is what the registry is asked for: the digest if any, else the tag.
func (r Ref) reference() string {
	if r.Digest != "" {
		return r.Digest.String()
	}
	return r.Tag
}

// At returns the reference pinned to d, tag kept: what is running.
func (r Ref) At(d digest.Digest) Ref {
	r.Digest = d
	return r
}

// key names the reference's folder in the cache: readable, and unique by
// a hash of the whole reference.
func (r Ref) key() string {
	sum := sha256.Sum256([]byte(r.String()))
	var b strings.Builder
	for _, c := range r.Registry + "_" + r.Repository + "_" + r.Tag {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 100 {
		name = name[:100]
	}
	return name + "-" + hex.EncodeToString(sum[:6])
}
