package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// A rule file, test file, trace or ssrun.yaml that is a named pipe or a link
// to /dev/zero is refused at once, the error naming it, where the command
// used to wait for a writer or read without end; the good rule next to it
// is still checked.
func TestCommandsRefuseFilesThatAreNoFiles(t *testing.T) {
	devZero := func(t *testing.T, p string) { testutil.LinkDevZero(t, p) }
	pipe := func(t *testing.T, p string) { testutil.Mkfifo(t, p) }
	const isPipe, isDevice = "not a regular file (a named pipe)", "not a regular file (a character device)"
	for _, tc := range []struct {
		name string
		file string // made in the rules folder DIR, next to good.lua
		make func(t *testing.T, p string)
		args []string // DIR and FILE stand for the folder and the file
		code int
		want string // in stderr, after the file's path
	}{
		{"check: a rule that is a named pipe", "f.lua", pipe, []string{"check", "DIR"}, 1, isPipe},
		{"check: a rule linked to /dev/zero", "z.lua", devZero, []string{"check", "DIR"}, 1, isDevice},
		{"check: ssrun.yaml linked to /dev/zero", "ssrun.yaml", devZero, []string{"check", "DIR"}, 1, isDevice},
		{"test: a test file that is a named pipe", "good.test.yaml", pipe, []string{"test", "DIR"}, 2, isPipe},
		{"replay: a trace that is a named pipe", "live.trace", pipe, []string{"replay", "FILE", "DIR"}, 2, isPipe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := checkDir(t, map[string]string{"good.lua": goodRule})
			p := filepath.Join(dir, tc.file)
			tc.make(t, p)
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.NewReplacer("DIR", dir, "FILE", p).Replace(a)
			}
			var r result
			testutil.Returns(t, "ssrun "+strings.Join(args, " "), func() { r = runCLI(t, "", args...) })
			if r.code != tc.code || !strings.Contains(r.stderr, p+": "+tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", r.code, r.stderr, tc.code, p+": "+tc.want)
			}
			if tc.args[0] == "check" && tc.file != "ssrun.yaml" && !strings.Contains(r.stdout, "ok "+filepath.Join(dir, "good.lua")) {
				t.Errorf("stdout %q: the good rule is not reported ok", r.stdout)
			}
		})
	}
}
