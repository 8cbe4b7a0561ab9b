package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/ssrun/ssrun/internal/fsfollow"
)

// followFile calls changed with the new content of file (a secret file,
// read with readSecretFile) each time it differs from the last content
// seen, until ctx ends or stop is called; stop waits for the watch to end.
// The file's folder is watched, not the file: an editor's rename and a
// Kubernetes symlink swap replace it. what names the file in warnings.
func (a *app) followFile(ctx context.Context, what, file string, changed func(ctx context.Context, content []byte)) (stop func(), err error) {
	w, err := fsfollow.New()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", what, err)
	}
	if err := w.Add(filepath.Dir(file)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch %s %s: %w", what, file, err)
	}
	last, _ := readSecretFile(file)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		fsfollow.Follow(ctx, w, fsfollow.Options{
			OnChange: func([]string) { // a change is whole: read the file again
				b, err := readSecretFile(file)
				if err != nil || bytes.Equal(b, last) {
					return
				}
				last = b
				changed(ctx, b)
			},
			OnError: func(err error) { a.log.Warn("watching the "+what, "file", file, "err", err) },
		})
	})
	return func() { cancel(); wg.Wait(); _ = w.Close() }, nil
}
