package deploy_test

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// dockerfile is the Dockerfile's instructions, continuation lines joined
// and comments dropped.
type dockerfile struct {
	lines []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		d.lines = append(d.lines, cur+line)
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// with returns the instructions that start with prefix.
func (d dockerfile) with(prefix string) []string {
	var out []string
	for _, l := range d.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// goModVersion is the Go version go.mod asks for: its toolchain line if it
// has one, else its go line.
func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return string(m[1])
}

// The builder stage uses the Go version of go.mod, and the final stage is
// distroless/static (or scratch) run as a numeric, non-root user.
func TestDockerfileStages(t *testing.T) {
	d := readDockerfile(t)
	want := goModVersion(t)
	args := d.with("ARG GO_VERSION=")
	if len(args) != 1 || strings.TrimPrefix(args[0], "ARG GO_VERSION=") != want {
		t.Errorf("ARG GO_VERSION: %q, want GO_VERSION=%s (go.mod)", args, want)
	}
	froms := d.with("FROM ")
	if len(froms) != 2 {
		t.Fatalf("FROM lines %q, want a builder and a final stage", froms)
	}
	if !strings.HasPrefix(froms[0], "FROM golang:${GO_VERSION} ") {
		t.Errorf("builder %q, want FROM golang:${GO_VERSION}", froms[0])
	}
	final := strings.Fields(froms[1])[1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("final stage %q, want distroless/static or scratch", final)
	}
	users := d.with("USER ")
	if len(users) != 1 {
		t.Fatalf("USER lines %q, want one, in the final stage", users)
	}
	for _, id := range strings.Split(strings.TrimPrefix(users[0], "USER "), ":") {
		n, err := strconv.Atoi(id)
		if err != nil || n == 0 {
			t.Errorf("%q: want a numeric, non-root user and group (Kubernetes' runAsNonRoot checks the number)", users[0])
		}
	}
	if e := d.with("ENTRYPOINT "); len(e) != 1 || !strings.Contains(e[0], `"/usr/local/bin/ssrun"`) {
		t.Errorf("ENTRYPOINT %q, want the ssrun binary", e)
	}
}

// imageOut is where the Dockerfile's build line writes the binary; the
// tests write it to a temporary directory instead.
const imageOut = "/out/ssrun"

var image struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  string
}

// imageBinary builds ssrun with the Dockerfile's build line, as written,
// once per test binary, and returns its path. The environment is the
// builder image's: no GOFLAGS.
func imageBinary(t *testing.T) string {
	t.Helper()
	image.once.Do(func() {
		var runs []string
		for _, l := range readDockerfile(t).with("RUN ") {
			if strings.Contains(l, " go build ") {
				runs = append(runs, l)
			}
		}
		if len(runs) != 1 || !strings.Contains(runs[0], " -o "+imageOut+" ") {
			t.Fatalf("build lines %q: want one, writing -o %s", runs, imageOut)
		}
		image.dir, image.err = os.MkdirTemp("", "ssrun-deploy-test-")
		if image.err != nil {
			return
		}
		image.path = filepath.Join(image.dir, "ssrun")
		line := strings.Replace(strings.TrimPrefix(runs[0], "RUN "), " -o "+imageOut+" ", " -o "+image.path+" ", 1)
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = ".."
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOFLAGS=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		image.out = line + "\n" + string(out)
		image.err = err
	})
	if image.err != nil {
		t.Fatalf("the Dockerfile's build: %v\n%s", image.err, image.out)
	}
	return image.path
}

func removeImageBinary() error {
	if image.dir == "" {
		return nil
	}
	return os.RemoveAll(image.dir)
}

// The Dockerfile's build line makes a static binary (it runs on
// distroless/static or scratch: no dynamic loader, no shared libraries),
// built without cgo, with -trimpath, and stamped with the VCS revision
// (which --version reports).
func TestDockerfileBuildsAStaticStampedBinary(t *testing.T) {
	bin := imageBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) != 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for key, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[key] != want {
			t.Errorf("build setting %s=%q, want %q", key, settings[key], want)
		}
	}
	// Go stamps the revision when the module root has a .git directory:
	// a clone, as CI and the Docker build context have. A git worktree
	// (.git is a file there) or a tree without git is built unstamped.
	if fi, err := os.Stat("../.git"); err == nil && fi.IsDir() {
		if len(settings["vcs.revision"]) < 7 || info.Main.Version == "(devel)" {
			t.Errorf("no VCS revision or module version stamped in the binary: version %q, settings %v", info.Main.Version, settings)
		}
	} else {
		t.Logf("not a git clone (../.git is not a directory): the VCS stamp is not checked")
	}
	// It runs (here, with nothing else than it needs on distroless).
	if out, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "run") {
		t.Errorf("ssrun --help: %v\n%s", err, out)
	}
}
