package ocirules

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"

	"github.com/ssrun/ssrun/internal/safefile"
)

// A signature is an OCI artifact of its own that refers to the rules
// manifest (its subject), found through the registry's referrers API (or
// oras' fallback tag where a registry lacks it):
//
//   - artifactType SignatureType, the empty config;
//   - one layer of MediaTypeSignature: 64 bytes, the ed25519 signature of
//     signedPayload(the rules manifest's digest), annotated with the
//     signing key's id (KeyID).
//
// The digest names the manifest, and the manifest names every file by
// digest: signing it signs every byte that is loaded. ed25519 over the
// digest was chosen over cosign: cosign's formats pull in sigstore's
// libraries (and, keyless, a transparency log and an identity provider
// that an edge cluster may not reach), while a key pair made by openssl
// and a 64-byte signature need nothing but the standard library.
const (
	SignatureType      = "application/vnd.ssrun.signature.v1"
	MediaTypeSignature = "application/vnd.ssrun.signature.v1.ed25519"
	// AnnotationKeyID names the key that made a signature (KeyID).
	AnnotationKeyID = "dev.ssrun.signature.key"
)

// signedPayload is what a signature signs: a fixed context, so that a
// signature made for something else never verifies here, and the digest.
func signedPayload(d digest.Digest) []byte {
	return []byte("ssrun rules artifact v1\n" + d.String())
}

// Sign returns the signature of the manifest digest d by key.
func Sign(key ed25519.PrivateKey, d digest.Digest) []byte {
	return ed25519.Sign(key, signedPayload(d))
}

// KeyID names a public key: the first 16 hex digits of the SHA-256 of its
// PKIX encoding.
func KeyID(pub ed25519.PublicKey) string {
	der, _ := x509.MarshalPKIXPublicKey(pub) // cannot fail for ed25519
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:8])
}

// verifySignature checks sig, a signature layer's content, against d with
// any of keys.
func verifySignature(keys []ed25519.PublicKey, d digest.Digest, sig []byte) bool {
	if len(sig) != ed25519.SignatureSize {
		return false
	}
	for _, k := range keys {
		if ed25519.Verify(k, signedPayload(d), sig) {
			return true
		}
	}
	return false
}

// maxKeyFileBytes bounds a key file.
const maxKeyFileBytes = 64 << 10

// ReadPublicKey reads an ed25519 public key from a PEM file ("PUBLIC KEY",
// PKIX), as `openssl pkey -pubout` writes it.
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("key file %s: a %T, want an ed25519 public key (openssl genpkey -algorithm ed25519)", path, k)
	}
	return pub, nil
}

// ReadPrivateKey reads an ed25519 private key from a PEM file ("PRIVATE
// KEY", PKCS #8), as `openssl genpkey -algorithm ed25519` writes it.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key file %s: a %T, want an ed25519 private key (openssl genpkey -algorithm ed25519)", path, k)
	}
	return priv, nil
}

func readPEM(path, typ string) ([]byte, error) {
	b, err := safefile.Read(path, maxKeyFileBytes)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("key file %s: no PEM block", path)
	}
	if blk.Type != typ {
		return nil, fmt.Errorf("key file %s: a %q PEM block, want %q", path, blk.Type, typ)
	}
	return blk.Bytes, nil
}

// ErrUnsigned is wrapped by the error of a pull whose artifact has no
// signature by a trusted key.
var ErrUnsigned = errors.New("no valid signature by a trusted key")
