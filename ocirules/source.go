package ocirules

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// Source is the local rules folder of a reference, kept in step with the
// registry: Dir is what the host loads and follows.
type Source struct {
	c       *Client
	ref     Ref
	m       *mount
	running digest.Digest
	files   []File
}

// Open makes and locks the folder of ref under cache and fills it:
//
//   - a reference pinned by digest whose version the cache has (verified
//     again) is used without asking the registry: its content never
//     changes;
//   - otherwise the artifact is pulled (verified, and signed when
//     Options.VerifyKeys are set);
//   - if that pull fails and the cache has the last version pulled for
//     ref (verified again), that version runs, and a warning says why.
//
// Close releases the folder.
func (c *Client) Open(ctx context.Context, ref Ref, cache string) (*Source, error) {
	m, err := openMount(cache, ref)
	if err != nil {
		return nil, err
	}
	s := &Source{c: c, ref: ref, m: m}
	cached, cerr := s.cached()
	if cerr == nil && ref.Pinned() {
		return s, nil
	}
	_, perr := s.Pull(ctx)
	switch {
	case perr == nil:
		return s, nil
	case cerr == nil:
		c.log.Warn("cannot pull the rules; running the version in the cache", "ref", ref.String(), "cached", cached.String(), "err", perr)
		return s, nil
	}
	_ = m.close()
	if errors.Is(cerr, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (and the cache %s has no version of it)", perr, cache)
	}
	return nil, fmt.Errorf("%w (and the cache's version was refused: %w)", perr, cerr)
}

// cached takes the version the folder shows, if it verifies, as the one
// running; for a pinned reference it must be the digest named.
func (s *Source) cached() (digest.Digest, error) {
	d, ok := s.m.current()
	if !ok {
		return "", fmt.Errorf("no cached version: %w", os.ErrNotExist)
	}
	if s.ref.Pinned() && d != s.ref.Digest {
		return "", fmt.Errorf("cached version %s is not %s: %w", d, s.ref.Digest, os.ErrNotExist)
	}
	files, err := s.m.verify(d, s.c.limits, s.c.o.VerifyKeys)
	if err != nil {
		return "", fmt.Errorf("cached version %s: %w", d, err)
	}
	s.running, s.files = d, files
	return d, nil
}

// Dir is the folder to load.
func (s *Source) Dir() string { return s.m.dir }

// Running is the reference pinned to the version the folder shows.
func (s *Source) Running() Ref { return s.ref.At(s.running) }

// Files are the files of the version the folder shows.
func (s *Source) Files() []File { return s.files }

// Close releases the folder; its content stays in the cache.
func (s *Source) Close() error { return s.m.close() }

// Pull asks the registry which version the reference names and, when it
// is not the one shown, pulls it (verified, signed when keys are set) and
// shows it in one swap. changed says whether a new version is shown. On
// error the folder is unchanged.
func (s *Source) Pull(ctx context.Context) (changed bool, err error) {
	repo, err := s.c.repo(s.ref)
	if err != nil {
		return false, err
	}
	desc, err := s.c.resolve(ctx, repo, s.ref)
	if err != nil {
		return false, err
	}
	if desc.Digest == s.running {
		return false, nil
	}
	at := s.ref.At(desc.Digest)
	mb, files, err := s.c.manifest(ctx, repo, s.ref, desc)
	if err != nil {
		return false, err
	}
	var sig []byte
	if len(s.c.o.VerifyKeys) > 0 {
		if sig, err = s.c.signature(ctx, repo, at, desc); err != nil {
			return false, err
		}
	}
	// A version folder written whole before (a swap that failed half
	// way) is shown as it is; any other is written anew.
	if _, err := s.m.verify(desc.Digest, s.c.limits, s.c.o.VerifyKeys); err != nil {
		tmp, err := s.m.stage()
		if err != nil {
			return false, err
		}
		if err := s.fill(ctx, repo, at, tmp, files, mb, sig); err != nil {
			_ = os.RemoveAll(tmp)
			return false, err
		}
		if err := s.m.commit(tmp, desc.Digest); err != nil {
			_ = os.RemoveAll(tmp)
			return false, err
		}
	}
	if err := s.m.show(desc.Digest, files); err != nil {
		return false, fmt.Errorf("show %s: %w", at, err)
	}
	s.running, s.files = desc.Digest, files
	return true, nil
}

// fill writes the files of the version at into the staged folder tmp,
// each verified, reusing those the running version has, then its
// manifest and signature.
func (s *Source) fill(ctx context.Context, repo *remote.Repository, at Ref, tmp string, files []File, manifest, sig []byte) error {
	for _, f := range files {
		p, err := inside(tmp, f.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		if s.running != "" && s.m.reuse(s.running, s.files, f, p) {
			continue
		}
		_ = os.Remove(p)
		if err := fetchFile(ctx, repo, f, p); err != nil {
			return fmt.Errorf("%s: file %s (%s, %d bytes): %w", at, f.Name, f.Desc.Digest, f.Desc.Size, err)
		}
	}
	if err := writeNew(filepath.Join(tmp, manifestFile), manifest, 0o644); err != nil {
		return fmt.Errorf("rules cache: %w", err)
	}
	if sig != nil {
		if err := writeNew(filepath.Join(tmp, sigFile), sig, 0o644); err != nil {
			return fmt.Errorf("rules cache: %w", err)
		}
	}
	return nil
}

// fetchFile fetches the blob of f into path, checking while it is written
// that the registry sends exactly f's size and bytes of f's digest.
func fetchFile(ctx context.Context, repo *remote.Repository, f File, path string) error {
	rc, err := repo.Blobs().Fetch(ctx, f.Desc)
	if err != nil {
		return err
	}
	defer rc.Close()
	vr := content.NewVerifyReader(rc, f.Desc)
	if err := writeFrom(path, vr); err != nil {
		return explainVerify(err)
	}
	return explainVerify(vr.Verify())
}

// explainVerify says in the user's words what a verification error means.
func explainVerify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, content.ErrMismatchedDigest):
		return fmt.Errorf("the registry sent bytes that do not match the digest (refused): %w", err)
	case errors.Is(err, content.ErrTrailingData):
		return fmt.Errorf("the registry sent more bytes than the size (refused): %w", err)
	}
	return err
}

// Follow pulls the reference every interval until ctx ends (see Pull),
// each pull bounded by timeout; a new version is logged, and so is a
// failed pull (once per distinct error, the version shown keeps running).
// A pinned reference never changes: Follow returns at once.
func (s *Source) Follow(ctx context.Context, every, timeout time.Duration) {
	if s.ref.Pinned() {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := s.Running()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		changed, err := s.Pull(pctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if err.Error() != lastErr {
				s.c.log.Warn("pulling the rules failed; the version shown keeps running", "ref", s.ref.String(), "running", s.running.String(), "err", err)
			}
			lastErr = err.Error()
		case changed:
			lastErr = ""
			s.c.log.Info("rules artifact changed: the new version is shown and reloads", "ref", s.ref.String(), "from", before.Digest.String(), "to", s.running.String(), "files", len(s.files))
		case lastErr != "":
			lastErr = ""
			s.c.log.Info("the registry answers again", "ref", s.ref.String())
		}
	}
}
