package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/rulefile"
	"github.com/ssrun/ssrun/internal/testutil"
)

// A rule file that is a link to /dev/zero, a named pipe, or a (sparse) file
// over rulefile.MaxBytes is refused at once, with an error naming it, and
// is never read whole: the folder's other rules load, and reload when
// edited, and the host stops without waiting on it.
func TestHostileRuleFilesRefused(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		make       func(t *testing.T, p string)
		want       string // in the file's load error
	}{
		{"link to /dev/zero", "z.gorule", func(t *testing.T, p string) { testutil.LinkDevZero(t, p) },
			"not a regular file (a character device)"},
		{"named pipe", "f.gorule", func(t *testing.T, p string) { testutil.Mkfifo(t, p) },
			"not a regular file (a named pipe)"},
		{"sparse file over the limit", "big.gorule", func(t *testing.T, p string) {
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(rulefile.MaxBytes + 1); err != nil {
				t.Fatal(err)
			}
		}, "more than the limit of 256 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, v := range []string{"v1", "v2"} {
				e.rt.register(v, goRule{init: watchInit("k"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
					_, err := h.Set(ctx, "out", []byte(v), abi.SetOptions{})
					return err
				}})
			}
			good := filepath.Join(e.dir, "good.gorule")
			e.write(good, "v1")
			bad := filepath.Join(e.dir, tc.file)
			tc.make(t, bad)

			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan struct{})
			done := make(chan error, 1)
			go func() { done <- e.host.WatchDir(ctx, e.dir, ready) }()
			t.Cleanup(func() {
				cancel()
				testutil.Returns(t, "WatchDir, once cancelled", func() { <-done })
			})
			testutil.Returns(t, "the folder's first load", func() { <-ready })

			var st RuleStatus
			for _, s := range e.host.Status() {
				if s.Path == bad {
					st = s
				}
			}
			if st.State != StateLoadFailed || !strings.Contains(st.LastError, bad) || !strings.Contains(st.LastError, tc.want) {
				t.Errorf("status of %s: state %q, error %q; want %q naming the file and %q", tc.file, st.State, st.LastError, StateLoadFailed, tc.want)
			}
			e.set("k", "1")
			e.waitValue("out", "v1")
			e.write(good, "v2")
			n := 1
			waitFor(t, "the good rule reloaded", func() bool {
				n++
				e.set("k", string(rune('0'+n%10)))
				v, _ := e.get("out")
				return v == "v2"
			})
			testutil.Returns(t, "Close", func() {
				if err := e.host.Close(context.Background()); err != nil {
					t.Errorf("close: %v", err)
				}
			})
		})
	}
}
