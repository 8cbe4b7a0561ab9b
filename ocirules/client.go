package ocirules

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/ssrun/ssrun/internal/safefile"
)

// Options of a Client.
type Options struct {
	// PlainHTTP talks to the registry without TLS (--insecure-registry).
	// Off by default: the registry's certificate is verified.
	PlainHTTP bool
	// CAFile, when set, is a PEM bundle of the certificate authorities the
	// registry's certificate is verified with, instead of the system's.
	CAFile string
	// RegistryConfig is a Docker config file with the registries'
	// credentials (auths, credsStore, credHelpers): ~/.docker/config.json's
	// format, which is also a Kubernetes pull secret's .dockerconfigjson.
	// Empty: Docker's own ($DOCKER_CONFIG/config.json, else
	// ~/.docker/config.json); a missing file means anonymous access.
	RegistryConfig string
	// VerifyKeys, when not empty, are the keys a pulled artifact must be
	// signed with (one suffices); an artifact without such a signature is
	// never loaded.
	VerifyKeys []ed25519.PublicKey
	// Limits bound what a pull accepts.
	Limits Limits
	Logger *slog.Logger
	// Transport replaces the HTTP transport (tests); nil: Go's default
	// transport with CAFile's authorities.
	Transport http.RoundTripper
}

// Client pushes and pulls rules artifacts.
type Client struct {
	o      Options
	limits Limits
	log    *slog.Logger
	http   *http.Client
}

// New returns a client with o.
func New(o Options) (*Client, error) {
	c := &Client{o: o, limits: o.Limits.withDefaults(), log: o.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	tr := o.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if o.CAFile != "" {
			pem, err := safefile.Read(o.CAFile, maxKeyFileBytes*16)
			if err != nil {
				return nil, fmt.Errorf("registry CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("registry CA file %s: no PEM certificate", o.CAFile)
			}
			t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		tr = t
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// repo returns the repository of ref, with credentials read now (a
// rotated pull secret counts at the next pull).
func (c *Client) repo(ref Ref) (*remote.Repository, error) {
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	var store credentials.Store
	if c.o.RegistryConfig != "" {
		store, err = credentials.NewStore(c.o.RegistryConfig, credentials.StoreOptions{})
	} else {
		store, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	repo.PlainHTTP = c.o.PlainHTTP
	repo.Client = &auth.Client{Client: c.http, Credential: credentials.Credential(store), Cache: auth.NewCache()}
	repo.ManifestMediaTypes = []string{ocispec.MediaTypeImageManifest}
	repo.MaxMetadataBytes = c.limits.ManifestBytes
	return repo, nil
}

// resolve asks the registry which manifest ref names now (a HEAD request).
func (c *Client) resolve(ctx context.Context, repo *remote.Repository, ref Ref) (ocispec.Descriptor, error) {
	desc, err := repo.Resolve(ctx, ref.reference())
	if errors.Is(err, auth.ErrBasicCredentialNotFound) {
		return desc, fmt.Errorf("resolve %s: %w: the registry wants credentials (docker login, or --registry-config with a Docker config or a pull secret's .dockerconfigjson)", ref, err)
	}
	if err != nil {
		return desc, fmt.Errorf("resolve %s: %w", ref, err)
	}
	if ref.Digest != "" && desc.Digest != ref.Digest {
		return desc, fmt.Errorf("resolve %s: the registry answered with %s", ref, desc.Digest)
	}
	if err := checkDigest(desc.Digest); err != nil {
		return desc, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return desc, nil
}

// fetchBytes fetches a small blob or manifest of at most limit bytes,
// verified against desc's size and digest.
func (c *Client) fetchBytes(ctx context.Context, f content.Fetcher, desc ocispec.Descriptor, limit int64) ([]byte, error) {
	if desc.Size < 0 || desc.Size > limit {
		return nil, fmt.Errorf("%s: %d bytes, over the limit of %d", desc.Digest, desc.Size, limit)
	}
	rc, err := f.Fetch(ctx, desc)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", desc.Digest, err)
	}
	defer rc.Close()
	b, err := content.ReadAll(rc, desc)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", desc.Digest, err)
	}
	return b, nil
}

// manifest fetches and parses the rules manifest desc names.
func (c *Client) manifest(ctx context.Context, repo *remote.Repository, ref Ref, desc ocispec.Descriptor) ([]byte, []File, error) {
	if desc.MediaType != ocispec.MediaTypeImageManifest {
		return nil, nil, fmt.Errorf("%s: a %q, want an OCI image manifest (push one with ssrun push)", ref, desc.MediaType)
	}
	b, err := c.fetchBytes(ctx, repo.Manifests(), desc, c.limits.ManifestBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: manifest %w", ref, err)
	}
	files, err := Parse(b, c.limits)
	if err != nil {
		return nil, nil, fmt.Errorf("%s@%s: %w", ref, desc.Digest, err)
	}
	return b, files, nil
}

// maxSignatures bounds the signatures of one artifact looked at.
const maxSignatures = 16

// signature finds a signature of the manifest desc by one of the trusted
// keys among its referrers and returns it, or an error wrapping
// ErrUnsigned that says what was found.
func (c *Client) signature(ctx context.Context, repo *remote.Repository, ref Ref, desc ocispec.Descriptor) ([]byte, error) {
	var sigs []ocispec.Descriptor
	errEnough := errors.New("enough")
	err := repo.Referrers(ctx, desc, SignatureType, func(rs []ocispec.Descriptor) error {
		for _, r := range rs {
			if r.ArtifactType == SignatureType && len(sigs) < maxSignatures {
				sigs = append(sigs, r)
			}
		}
		if len(sigs) >= maxSignatures {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("%s@%s: looking for its signatures: %w", ref, desc.Digest, err)
	}
	var problems []error
	for _, s := range sigs {
		sig, err := c.signatureOf(ctx, repo, s, desc.Digest)
		if err != nil {
			problems = append(problems, fmt.Errorf("signature %s: %w", s.Digest, err))
			continue
		}
		if verifySignature(c.o.VerifyKeys, desc.Digest, sig) {
			return sig, nil
		}
		problems = append(problems, fmt.Errorf("signature %s: not made by a trusted key", s.Digest))
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("%s@%s: %w: it has no signature (sign it: ssrun push --sign-key)", ref, desc.Digest, ErrUnsigned)
	}
	return nil, fmt.Errorf("%s@%s: %w (%d signature(s): %w)", ref, desc.Digest, ErrUnsigned, len(sigs), errors.Join(problems...))
}

// maxSignatureManifestBytes bounds a signature's manifest.
const maxSignatureManifestBytes = 64 << 10

// signatureOf fetches the signature manifest s and its signature layer,
// checking that its subject is subject.
func (c *Client) signatureOf(ctx context.Context, repo *remote.Repository, s ocispec.Descriptor, subject digest.Digest) ([]byte, error) {
	if err := checkDigest(s.Digest); err != nil {
		return nil, err
	}
	s.MediaType = ocispec.MediaTypeImageManifest
	b, err := c.fetchBytes(ctx, repo.Manifests(), s, maxSignatureManifestBytes)
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m.Subject == nil || m.Subject.Digest != subject {
		return nil, errors.New("its subject is another manifest")
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeSignature {
		return nil, fmt.Errorf("want one %s layer", MediaTypeSignature)
	}
	if err := checkDigest(m.Layers[0].Digest); err != nil {
		return nil, err
	}
	return c.fetchBytes(ctx, repo.Blobs(), m.Layers[0], ed25519.SignatureSize)
}

// pushBlob pushes b unless the registry has it.
func pushBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, r io.Reader) error {
	ok, err := repo.Blobs().Exists(ctx, desc)
	if err != nil {
		return fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	if ok {
		return nil
	}
	if err := repo.Blobs().Push(ctx, desc, r); err != nil {
		return fmt.Errorf("push blob %s: %w", desc.Digest, err)
	}
	return nil
}

// pushSignature pushes a signature of the manifest subject by key.
func pushSignature(ctx context.Context, repo *remote.Repository, subject ocispec.Descriptor, key ed25519.PrivateKey) error {
	sig := Sign(key, subject.Digest)
	layer := content.NewDescriptorFromBytes(MediaTypeSignature, sig)
	layer.Annotations = map[string]string{AnnotationKeyID: KeyID(key.Public().(ed25519.PublicKey))}
	if err := pushBlob(ctx, repo, layer, bytes.NewReader(sig)); err != nil {
		return err
	}
	if err := pushBlob(ctx, repo, ocispec.DescriptorEmptyJSON, bytes.NewReader(emptyConfig)); err != nil {
		return err
	}
	subj := ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: SignatureType,
		Config:       ocispec.DescriptorEmptyJSON,
		Layers:       []ocispec.Descriptor{layer},
		Subject:      &subj,
	}
	m.SchemaVersion = 2
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, b)
	if err := repo.Manifests().Push(ctx, desc, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("push signature: %w", err)
	}
	return nil
}
