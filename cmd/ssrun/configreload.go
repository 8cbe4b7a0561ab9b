package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/fsfollow"
)

// configFollower keeps a host's rule settings in step with ssrun.yaml: any
// change in the file's folder (an edit, a rename over it, the "..data"
// symlink swap of a Kubernetes ConfigMap volume) re-reads it, and when its
// content changed, applies `defaults:` and `rules:` to the running rules
// (Host.SetRuleConfig). A file that does not parse or validate is refused
// with its name and line, and the previous settings stay; so does a
// removed file (removing it must not lift every permission). `broker:` and
// `plugins:` apply at the next start; a change of them is logged.
type configFollower struct {
	a     *app
	h     *host.Host
	dir   string // the rules folder
	path  string // ssrun.yaml
	last  []byte // content of the applied file; nil: none
	cfg   *fileConfig
	watch *fsfollow.Watcher
}

// followConfig starts following the config at cfg.path (DIR/ssrun.yaml
// when cfg is nil) for h until ctx ends, and warns now about rule entries
// that match no file. stop ends it and waits for it.
func (a *app) followConfig(ctx context.Context, h *host.Host, dir string, cfg *fileConfig) (stop func()) {
	f := &configFollower{a: a, h: h, dir: dir, path: filepath.Join(dir, "ssrun.yaml"), cfg: cfg}
	if cfg != nil {
		f.path, f.last = cfg.path, cfg.raw
	}
	f.warnUnmatched()
	w, err := fsfollow.New()
	if err == nil {
		err = w.Add(filepath.Dir(f.path))
	}
	if err != nil {
		a.log.Warn("ssrun.yaml changes will not be applied: cannot watch its folder", "config", f.path, "err", err)
		if w != nil {
			_ = w.Close()
		}
		return func() {}
	}
	f.watch = w
	f.followTarget()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.run(ctx) }()
	return func() {
		cancel()
		<-done
		_ = w.Close()
	}
}

// run re-reads the file after each change in its folders, once the change
// is whole (see package fsfollow).
func (f *configFollower) run(ctx context.Context) {
	fsfollow.Follow(ctx, f.watch, fsfollow.Options{
		OnChange: func([]string) {
			f.reread(ctx)
			f.followTarget()
		},
		OnError: func(err error) { f.a.log.Warn("watching ssrun.yaml", "config", f.path, "err", err) },
	})
}

// followTarget watches the folder of the file the config links to, if it
// is a symlink, so that an edit of the target counts too.
func (f *configFollower) followTarget() {
	if target, err := filepath.EvalSymlinks(f.path); err == nil {
		_ = f.watch.Add(filepath.Dir(target)) // adding a watched folder again is harmless
	}
}

// reread applies the file if its content changed.
func (f *configFollower) reread(ctx context.Context) {
	b, err := readConfigFile(f.path)
	switch {
	case err != nil && f.last != nil:
		f.a.log.Warn("ssrun.yaml is gone or unreadable; the rules keep their settings", "config", f.path, "err", err)
		return
	case err != nil || bytes.Equal(b, f.last):
		return
	}
	cfg, err := loadConfig(f.path)
	if err != nil {
		f.a.log.Error("ssrun.yaml not applied; the previous settings stay", "err", err)
		return
	}
	if err := f.h.SetRuleConfig(ctx, cfg.Defaults.toHost(), cfg.hostRules()); err != nil {
		f.a.log.Error("ssrun.yaml not applied; the previous settings stay", "config", f.path, "err", err)
		return
	}
	old := f.cfg
	f.last, f.cfg = b, cfg
	f.a.log.Info("ssrun.yaml applied to the running rules (timeout and memory apply when a rule next loads)", "config", f.path)
	if old == nil {
		old = &fileConfig{}
	}
	if !reflect.DeepEqual(old.Broker, cfg.Broker) || !reflect.DeepEqual(old.Plugins, cfg.Plugins) {
		f.a.log.Warn("ssrun.yaml: changes under broker: and plugins: apply at the next start", "config", f.path)
	}
	f.warnUnmatched()
}

// warnUnmatched logs each name or glob under `rules:` that matches no file
// in the rules folder (nor a plugin named under `plugins:`).
func (f *configFollower) warnUnmatched() {
	if f.cfg == nil || len(f.cfg.Rules) == 0 {
		return
	}
	var files []string
	if entries, err := os.ReadDir(f.dir); err == nil {
		for _, e := range entries {
			files = append(files, e.Name())
		}
	}
	for _, p := range f.cfg.Plugins {
		files = append(files, filepath.Base(p.Path))
	}
	for _, name := range host.UnmatchedRules(f.cfg.hostRules(), files) {
		f.a.log.Warn("ssrun.yaml: rule entry matches no file in the rules folder (a typo?)", "config", f.path, "rule", name, "dir", f.dir)
	}
}
