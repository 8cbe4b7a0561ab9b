package ocirules_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ssrun/ssrun/ocirules"
	"github.com/ssrun/ssrun/ocirules/ocitest"
)

// With --verify-key, an artifact loads only with a signature by that key:
// signed by it, it loads; signed by another key, or not signed, it is
// refused (ErrUnsigned) and nothing is shown. Either of two keys will do.
// At a restart without the registry, the cached version's signature is
// checked again, against the keys of that start.
func TestSignatures(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	trusted, trustedPub := newKey(t)
	other, otherPub := newKey(t)
	pusher := client(t, reg, ocirules.Options{})
	signed := ref(t, "oci://"+reg.Host+"/rules/plant:signed")
	push(t, pusher, writeDir(t, rulesV1), signed, trusted)
	byOther := ref(t, "oci://"+reg.Host+"/rules/plant:other")
	push(t, pusher, writeDir(t, rulesV2), byOther, other)
	unsigned := ref(t, "oci://"+reg.Host+"/rules/plant:unsigned")
	push(t, pusher, writeDir(t, map[string]string{"u.lua": luaRule}), unsigned, nil)

	verifying := client(t, reg, ocirules.Options{VerifyKeys: pubKeys(t, trustedPub)})
	cache := t.TempDir()
	s, err := verifying.Open(ctxOf(t), signed, cache)
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, readDir(t, s.Dir()), packed(rulesV1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r     ocirules.Ref
		words []string
	}{
		{byOther, []string{"not made by a trusted key"}},
		{unsigned, []string{"it has no signature", "--sign-key"}},
	} {
		root := t.TempDir()
		_, err := open(t, verifying, tc.r, root)
		wantErr(t, err, tc.words...)
		if !errors.Is(err, ocirules.ErrUnsigned) {
			t.Errorf("%s: %v does not wrap ErrUnsigned", tc.r, err)
		}
		if m, _ := filepath.Glob(filepath.Join(root, "*", "*.lua")); len(m) != 0 {
			t.Errorf("%s: refused, yet %v shown", tc.r, m)
		}
	}
	if _, err := open(t, client(t, reg, ocirules.Options{VerifyKeys: pubKeys(t, otherPub, trustedPub)}), signed, t.TempDir()); err != nil {
		t.Fatalf("two keys, the second signed: %v", err)
	}

	reg.Close()
	s, err = verifying.Open(ctxOf(t), signed, cache)
	if err != nil {
		t.Fatalf("registry down, a signed version cached: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = open(t, client(t, reg, ocirules.Options{VerifyKeys: pubKeys(t, otherPub)}), signed, cache)
	wantErr(t, err, "cache's version was refused", "not made by a trusted key")
}

// A key file that is not an ed25519 public key in PEM is refused with its
// name.
func TestReadPublicKeyRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty.pem": "",
		"priv.pem":  "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIB2rJ1o0SOSq0cXd9cVSMHAm2VAxPmjMEk1Mjqf9ki9j\n-----END PRIVATE KEY-----\n",
		"junk.pem":  "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ocirules.ReadPublicKey(p)
		wantErr(t, err, p)
	}
}
