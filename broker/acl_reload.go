package broker

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"

	"github.com/ssrun/ssrun/internal/fsfollow"
)

// This file reloads the ACL file when it changes, without touching
// connections: checks made from then on use the new ACL (acl.go says what
// that means for subscriptions and registrations made before).

// aclWatch follows one ACL file.
type aclWatch struct {
	a    *authz
	file string
	w    *fsfollow.Watcher
	last []byte // content of the ACL in force
	bad  string // last reload error logged, not to repeat it
}

// watchACL starts watching the folder of file (and of its symlink target,
// if elsewhere); loaded is the content of the ACL in force. Run it with
// run.
func (a *authz) watchACL(file string, loaded []byte) (*aclWatch, error) {
	w, err := fsfollow.New()
	if err != nil {
		return nil, fmt.Errorf("watch ACL file: %w", err)
	}
	dirs := []string{filepath.Dir(file)}
	if target, err := filepath.EvalSymlinks(file); err == nil && filepath.Dir(target) != dirs[0] {
		dirs = append(dirs, filepath.Dir(target))
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("watch ACL file %s: %w", file, err)
		}
	}
	return &aclWatch{a: a, file: file, w: w, last: loaded}, nil
}

// run reloads the file after each change in its folders, once the change
// is whole (an editor's write and rename, a ConfigMap's `..data` swap; see
// package fsfollow), until ctx ends, then closes the watcher.
func (aw *aclWatch) run(ctx context.Context) {
	defer aw.w.Close()
	fsfollow.Follow(ctx, aw.w, fsfollow.Options{
		OnChange: func([]string) { aw.reload() },
		OnError:  func(err error) { aw.a.log.Warn("watching the ACL file", "file", aw.file, "err", err) },
	})
}

// reload reads the file and, if it changed and is valid, puts it in force.
// A file that does not load leaves the previous ACL in force.
func (aw *aclWatch) reload() {
	p, data, err := readACLFile(aw.file)
	if err != nil {
		if msg := err.Error(); msg != aw.bad {
			aw.bad = msg
			aw.a.log.Error("ACL file not reloaded; the previous ACL stays in force", "err", err)
		}
		return
	}
	aw.bad = ""
	if bytes.Equal(data, aw.last) {
		return
	}
	aw.last = data
	aw.a.policy.Store(p)
	aw.a.log.Info("ACL reloaded", "file", aw.file, "rules", len(p.rules), "users", len(p.users))
}
