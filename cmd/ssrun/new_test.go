package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// repoRoot is the ssrun checkout these tests run in.
const repoRoot = "../.."

// newAndTest scaffolds kind NAME in a temporary folder, builds it with
// build (run in the project folder; nil for none), and runs `ssrun test`
// on testDir (relative to the project), which must pass.
func newAndTest(t *testing.T, kind, name, testDir string, build func(proj string)) {
	t.Helper()
	dir := t.TempDir()
	args := []string{"new", kind, name, "--dir", dir}
	proj := dir
	if kind != "lua" {
		args = append(args, "--ssrun", repoRoot)
		proj = filepath.Join(dir, name)
	}
	if r := runCLI(t, "", args...); r.code != 0 {
		t.Fatalf("ssrun %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	if build != nil {
		build(proj)
	}
	r := runCLI(t, "", "test", "-v", filepath.Join(proj, testDir))
	if r.code != 0 {
		t.Fatalf("ssrun test: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []string{"the_input_is_copied_to_the_output", "deleting_the_input_deletes_the_output"} {
		if !strings.Contains(r.stdout, "--- PASS: "+name+".test.yaml/"+c) {
			t.Errorf("case %s did not pass:\n%s", c, r.stdout)
		}
	}
}

// goIn runs the go tool in dir, offline: the scaffold's dependencies are
// the checkout's, already in the module cache, and its go.sum starts as the
// checkout's so they are verified.
func goIn(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	sum, err := os.ReadFile(filepath.Join(repoRoot, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod"}, env...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestNewLuaPasses(t *testing.T) {
	newAndTest(t, "lua", "copier", ".", nil)
}

// The Go scaffold, built as its README says, passes its tests.
func TestNewGoBuildsAndPasses(t *testing.T) {
	newAndTest(t, "go", "copier", "rules", func(proj string) {
		goIn(t, proj, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-o", "rules/copier.wasm", ".")
	})
}

// The plugin scaffold, built as its README says, passes its tests.
func TestNewPluginBuildsAndPasses(t *testing.T) {
	newAndTest(t, "plugin", "copier", "rules", func(proj string) {
		goIn(t, proj, nil, "build", "-o", "rules/copier", ".")
	})
}

// The AssemblyScript scaffold pins the compiler like the example (the same
// package-lock.json and devDependencies) and extends the SDK's asconfig;
// with npm and its cache, it builds and passes its tests.
func TestNewAssemblyScript(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "", "new", "assemblyscript", "copier", "--dir", dir, "--ssrun", repoRoot); r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	proj := filepath.Join(dir, "copier")
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	example := filepath.Join(repoRoot, "examples", "thermostat-as")
	wantLock := strings.ReplaceAll(read(filepath.Join(example, "package-lock.json")), `"ssrun-thermostat-as"`, `"copier"`)
	if got := read(filepath.Join(proj, "package-lock.json")); got != wantLock {
		t.Errorf("package-lock.json is not the example's (renamed):\n%s", got)
	}
	devDeps := func(s string) string { _, after, _ := strings.Cut(s, `"devDependencies"`); return after }
	if got, want := devDeps(read(filepath.Join(proj, "package.json"))), devDeps(read(filepath.Join(example, "package.json"))); got != want {
		t.Errorf("package.json devDependencies %s, want the example's %s", got, want)
	}
	for _, ref := range []struct{ file, prefix, suffix string }{
		{"asconfig.json", `"extends": "`, `/asconfig.json"`},
		{"assembly/index.ts", `} from "`, `/assembly";`},
	} {
		text := read(filepath.Join(proj, ref.file))
		_, after, ok := strings.Cut(text, ref.prefix)
		rel, _, ok2 := strings.Cut(after, ref.suffix)
		if !ok || !ok2 {
			t.Fatalf("%s: no SDK path:\n%s", ref.file, text)
		}
		base := proj
		if ref.file == "assembly/index.ts" {
			base = filepath.Join(proj, "assembly")
		}
		if _, err := os.Stat(filepath.Join(base, filepath.FromSlash(rel), "assembly", "index.ts")); err != nil {
			t.Errorf("%s: the SDK path %s does not lead to the SDK: %v", ref.file, rel, err)
		}
	}
	if !npmBuild(t, proj) {
		return // checked, not built: npmBuild said why
	}
	if r := runCLI(t, "", "test", filepath.Join(proj, "rules")); r.code != 0 {
		t.Fatalf("ssrun test: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// An existing file is never overwritten: the error names it, and nothing
// of the scaffold is written.
func TestNewRefusesExistingFile(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "copier.test.yaml")
	if err := os.WriteFile(existing, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "new", "lua", "copier", "--dir", dir)
	if r.code != 2 || !strings.Contains(r.stderr, existing+" already exists") {
		t.Fatalf("exit %d, want 2 naming %s\n%s%s", r.code, existing, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(existing); string(b) != "mine" {
		t.Errorf("%s was changed: %q", existing, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "copier.lua")); err == nil {
		t.Error("copier.lua was written although the scaffold was refused")
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lua", "Copier"}, `invalid rule name "Copier"`},
		{[]string{"lua", "../up"}, `invalid rule name "../up"`},
		{[]string{"lua", "a b"}, `invalid rule name "a b"`},
		{[]string{"python", "copier"}, `unknown kind "python"`},
		{[]string{"go", "copier", "--ssrun", dir}, "not an ssrun checkout"},
	} {
		r := runCLI(t, "", append(append([]string{"new"}, c.args...), "--dir", dir)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("new %v: exit %d, want 2 and %q\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused scaffolds wrote %d entries", len(entries))
	}
}

// A Go scaffold requires the version of the binary that made it, only
// when the go tool can fetch that version.
func TestRequiredVersion(t *testing.T) {
	for _, c := range []struct {
		path, version, want string
	}{
		{ssrunModule, "v1.4.0", "v1.4.0"},
		{ssrunModule, "v0.0.0-20261123155140-0123456789ab", "v0.0.0-20261123155140-0123456789ab"},
		{ssrunModule, "(devel)", ""},
		{ssrunModule, "", ""},
		{ssrunModule, "v1.4.1-0.20261123155140-0123456789ab+dirty", ""},
		{"example.com/fork", "v1.4.0", ""},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: c.path, Version: c.version}}
		got, err := requiredVersion(bi)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("%s %s: %q, %v; want %q", c.path, c.version, got, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "--ssrun") {
			t.Errorf("%s %s: the error does not say what to do: %v", c.path, c.version, err)
		}
	}
}

// A scaffold's go line is the ssrun module's own.
func TestScaffoldGoVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\ngo "+scaffoldGoVersion+"\n") {
		t.Errorf("go.mod's go line is not %s: change scaffoldGoVersion", scaffoldGoVersion)
	}
}

// git runs git in dir, with an identity of its own (the machine may have
// none), and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=ssrun test", "-c", "user.email=test@ssrun.invalid", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Scaffolds can be committed: `ssrun new go`, `plugin` and
// `assemblyscript`, made in a fresh git repository next to an ssrun
// checkout, are committed, cloned elsewhere with the checkout beside it,
// and the first place is removed; the clone builds and passes its tests.
// Nothing committed names a path of the machine: go.mod replaces the
// module by a relative path (this ssrun is a development build, with no
// version to require), and the AssemblyScript scaffold has its own copy of
// the SDK. Each command says which it did.
//
// The AssemblyScript scaffold is built only where npm has its compiler in
// its cache (the test never goes online): .ci/run puts it there and sets
// SSRUN_REQUIRE_NPM=1, which makes a missing npm or cache a failure; on a
// fresh machine without them the test says so and checks the other two.
func TestNewScaffoldsCommitAndBuildElsewhere(t *testing.T) {
	checkout, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	first := t.TempDir()
	if err := os.Symlink(checkout, filepath.Join(first, "ssrun")); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(first, "rules-repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "init", "-q")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"new", "go", "copier", "--ssrun", "../ssrun"}, "go.mod replaces github.com/ssrun/ssrun with the checkout " + filepath.Join(first, "ssrun") + ", by the relative path ../../ssrun"},
		{[]string{"new", "plugin", "piper", "--ssrun", "../ssrun"}, "by the relative path ../../ssrun"},
		{[]string{"new", "assemblyscript", "ascopier"}, "the AssemblyScript SDK is a copy of this ssrun's (a development build), in ascopier/ssrun-sdk"},
	} {
		cmd := exec.Command(ssrunBinary(t), c.args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.says) {
			t.Fatalf("ssrun %s: %v, want it to say %q:\n%s", strings.Join(c.args, " "), err, c.says, out)
		}
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "scaffolds")
	for _, f := range strings.Fields(git(t, repo, "ls-files")) {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, abs := range []string{first, checkout} {
			if strings.Contains(string(b), abs) {
				t.Errorf("%s names the path %s of this machine", f, abs)
			}
		}
	}

	second := t.TempDir()
	if err := os.Symlink(checkout, filepath.Join(second, "ssrun")); err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(second, "clone")
	git(t, second, "clone", "-q", repo, clone)
	if err := os.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	goIn(t, filepath.Join(clone, "copier"), []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-o", "rules/copier.wasm", ".")
	goIn(t, filepath.Join(clone, "piper"), nil, "build", "-o", "rules/piper", ".")
	built := []string{"copier", "piper"}
	if npmBuild(t, filepath.Join(clone, "ascopier")) {
		built = append(built, "ascopier")
	}
	for _, name := range built {
		if r := runBin(t, nil, "test", filepath.Join(clone, name, "rules")); r.code != 0 || !strings.Contains(r.stdout, "ok ") || strings.Contains(r.stderr, "warning") {
			t.Fatalf("ssrun test %s: %+v", name, r)
		}
	}
}

// npmBuild installs an AssemblyScript project's compiler from npm's cache
// (offline) and builds it. Without npm or the cache it fails the test if
// SSRUN_REQUIRE_NPM is set (.ci/run), else logs why and returns false.
func npmBuild(t *testing.T, dir string) bool {
	t.Helper()
	required := os.Getenv("SSRUN_REQUIRE_NPM") != ""
	if _, err := exec.LookPath("npm"); err != nil {
		if required {
			t.Fatalf("npm is needed to build the AssemblyScript scaffold: %v", err)
		}
		t.Logf("npm not found: the AssemblyScript scaffold was made and committed, not built (.ci/run builds it)")
		return false
	}
	for _, args := range [][]string{{"ci", "--offline", "--no-audit", "--no-fund", "--loglevel=error"}, {"run", "--silent", "build"}} {
		cmd := exec.Command("npm", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			if required || args[0] != "ci" {
				t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			t.Logf("npm's cache lacks the AssemblyScript compiler (npm ci --offline: %v): the scaffold was made and committed, not built; run npm ci in examples/thermostat-as once, or .ci/run, to build it too", err)
			return false
		}
	}
	return true
}

// A rule built from sources says how to build it when it is missing, and
// warns when its sources are newer than it: the tests would run an old
// build.
func TestTestSaysHowToBuildAndWhenStale(t *testing.T) {
	dir := t.TempDir()
	if r := runBin(t, nil, "new", "go", "copier", "--dir", dir, "--ssrun", repoRoot); r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	proj := filepath.Join(dir, "copier")
	r := runBin(t, nil, "test", filepath.Join(proj, "rules"))
	want := filepath.Join(proj, "rules", "copier.wasm") + " does not exist: build it first, in " + proj + ": GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rules/copier.wasm ."
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Fatalf("missing module: %+v\nwant %q", r, want)
	}
	goIn(t, proj, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-o", "rules/copier.wasm", ".")
	if r := runBin(t, nil, "test", filepath.Join(proj, "rules")); r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("fresh build: %+v", r)
	}
	later := time.Now().Add(time.Minute) // an edit after the build
	if err := os.Chtimes(filepath.Join(proj, "main.go"), later, later); err != nil {
		t.Fatal(err)
	}
	r = runBin(t, nil, "test", filepath.Join(proj, "rules"))
	if r.code != 0 || !strings.Contains(r.stderr, "ssrun test: warning: "+filepath.Join(proj, "rules", "copier.wasm")+" is older than its source "+filepath.Join(proj, "main.go")+": the tests run the old build; rebuild it") {
		t.Fatalf("stale module: %+v", r)
	}
}
