package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/ssrun/ssrun/internal/fsfollow"
)

// This file reloads the ACL file and the password file when they change,
// without touching connections: decisions made from then on use the new
// version (acl.go says what that means for subscriptions and registrations
// made before; a client connected with a password since removed stays
// connected until it reconnects).

// fileWatch follows one file the broker loaded at start.
type fileWatch struct {
	log  *slog.Logger
	what string // "ACL file", "password file"
	file string
	w    *fsfollow.Watcher
	last []byte // content of the version in force
	bad  string // last reload error logged, not to repeat it
	// load reads and checks the file; apply puts it in force and returns
	// what to log about it.
	load func() (data []byte, apply func() []any, err error)
}

// watchFile starts watching the folder of file (and of its symlink target,
// if elsewhere); loaded is the content in force. Run it with run.
func watchFile(log *slog.Logger, what, file string, loaded []byte, load func() ([]byte, func() []any, error)) (*fileWatch, error) {
	w, err := fsfollow.New()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", what, err)
	}
	dirs := []string{filepath.Dir(file)}
	if target, err := filepath.EvalSymlinks(file); err == nil && filepath.Dir(target) != dirs[0] {
		dirs = append(dirs, filepath.Dir(target))
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("watch %s %s: %w", what, file, err)
		}
	}
	return &fileWatch{log: log, what: what, file: file, w: w, last: loaded, load: load}, nil
}

// run reloads the file after each change in its folders, once the change
// is whole (an editor's write and rename, a ConfigMap's `..data` swap; see
// package fsfollow), until ctx ends, then closes the watcher.
func (fw *fileWatch) run(ctx context.Context) {
	defer fw.w.Close()
	fsfollow.Follow(ctx, fw.w, fsfollow.Options{
		OnChange: func([]string) { fw.reload() },
		OnError:  func(err error) { fw.log.Warn("watching the "+fw.what, "file", fw.file, "err", err) },
	})
}

// reload reads the file and, if it changed and is valid, puts it in force.
// A file that does not load leaves the previous version in force.
func (fw *fileWatch) reload() {
	data, apply, err := fw.load()
	if err != nil {
		if msg := err.Error(); msg != fw.bad {
			fw.bad = msg
			fw.log.Error(fw.what+" not reloaded; the previous version stays in force", "err", err)
		}
		return
	}
	fw.bad = ""
	if bytes.Equal(data, fw.last) {
		return
	}
	fw.last = data
	fw.log.Info(fw.what+" reloaded", append([]any{"file", fw.file}, apply()...)...)
}

// watchACL follows the ACL file; loaded is the content in force.
func (a *authz) watchACL(file string, loaded []byte) (*fileWatch, error) {
	return watchFile(a.log, "ACL file", file, loaded, func() ([]byte, func() []any, error) {
		p, data, err := readACLFile(file)
		return data, func() []any {
			a.policy.Store(p)
			return []any{"rules", len(p.rules), "users", len(p.users)}
		}, err
	})
}

// watchPasswords follows the password file; loaded is the content in
// force, extra the users given in Config.Users, kept across reloads.
func (a *authz) watchPasswords(file string, loaded []byte, extra map[string][]byte) (*fileWatch, error) {
	return watchFile(a.log, "password file", file, loaded, func() ([]byte, func() []any, error) {
		c, data, err := readPasswordFile(file)
		if err == nil && len(extra) > 0 {
			if c, err = c.with(extra); err != nil {
				err = &PasswordFileError{File: file, Msg: "with the built-in users", Err: err}
			}
		}
		return data, func() []any {
			a.creds.Store(c)
			return []any{"users", len(c.users)}
		}, err
	})
}
