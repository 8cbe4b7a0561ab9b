package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoFiles returns the files git tracks in the repository, relative to
// its root, with the ones added in the working tree and not ignored.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil { // not deleted in the working tree
			files = append(files, f)
		}
	}
	return files
}

// headingSlug is the anchor GitHub gives a Markdown heading.
func headingSlug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a Markdown file.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if !inCode && strings.HasPrefix(l, "#") {
			out[headingSlug(strings.TrimLeft(l, "#"))] = true
		}
	}
	return out
}

// The documentation stays true to the tree: the README and docs/ link
// nothing outside the repository; in every Markdown file of it, each
// relative link leads to a file or folder that exists, and each #anchor to
// a heading of its target; and every file of the repository that a file
// cites (a doc, a comment: `deploy/manifest_test.go`) exists.
func TestDocsLinkOnlyIntoTheRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	files := repoFiles(t, root)
	external := regexp.MustCompile(`(?i)\b(?:https?|ftp)://[^\s)>\]"'` + "`" + `]+`)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var top []string
	for _, f := range files {
		if d, _, ok := strings.Cut(f, "/"); ok && !strings.HasPrefix(d, ".") && !strings.Contains(strings.Join(top, " "), " "+d+" ") {
			top = append(top, " "+d+" ")
		}
	}
	dirs := make([]string, len(top))
	for i, d := range top {
		dirs[i] = regexp.QuoteMeta(strings.TrimSpace(d))
	}
	// A cited file: a path under a top folder of the repository, ending in
	// the extension of a source or document (build outputs do not count).
	cited := regexp.MustCompile(`(?:^|[\s(` + "`" + `'"\[])((?:` + strings.Join(dirs, "|") + `)/[A-Za-z0-9_./-]*\.(?:go|md|yaml|yml|sh|json|ts|lua|tmpl|proto))\b`)
	texts := map[string]bool{".md": true, ".go": true, ".yaml": true, ".yml": true, ".sh": true, ".ts": true, ".lua": true, ".tmpl": true, "": true}
	checked := 0
	for _, f := range files {
		if !texts[filepath.Ext(f)] || strings.Contains(f, "/testdata/") || strings.HasSuffix(f, ".pb.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if strings.HasSuffix(f, ".md") {
			checked++
			if f == "README.md" || strings.HasPrefix(f, "docs/") {
				for _, l := range external.FindAllString(text, -1) {
					t.Errorf("%s links outside the repository: %s (put what it says in docs/)", f, l)
				}
			}
			for _, m := range link.FindAllStringSubmatch(text, -1) {
				target, anchor, _ := strings.Cut(m[1], "#")
				if strings.Contains(target, ":") {
					continue // a scheme, reported above
				}
				p := f
				if target != "" {
					p = filepath.Join(filepath.Dir(f), target)
				}
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s links to %s, which is not in the repository", f, m[1])
					continue
				}
				if anchor != "" && strings.HasSuffix(p, ".md") {
					tb, _ := os.ReadFile(filepath.Join(root, p))
					if !anchors(string(tb))[anchor] {
						t.Errorf("%s links to %s: %s has no heading #%s", f, m[1], p, anchor)
					}
				}
			}
		}
		for _, m := range cited.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".")
			if strings.ContainsAny(p, "*<>{}") || strings.Contains(p, "NAME") || strings.Contains(p, "...") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s cites %s, which is not in the repository", f, p)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d Markdown files checked", checked)
	}
}

// The README stays short (the rest is in docs/) and opens with the two
// commands a new user runs on a fresh machine, both true: one runs the
// main job on the embedded default (ssrun dev on an example that exists),
// the other the tests, as CI runs them.
func TestREADMEOpensWithTheTwoCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 400 {
		t.Errorf("README.md has %d lines, more than 400: move details to docs/", n)
	}
	_, rest, _ := strings.Cut(readme, "```sh\n")
	block, _, _ := strings.Cut(rest, "```")
	if before, _, _ := strings.Cut(readme, "```"); strings.Count(before, "\n") > 10 {
		t.Errorf("the commands come after %d lines", strings.Count(before, "\n"))
	}
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) != 2 {
		t.Fatalf("the first block has %d commands, want 2:\n%s", len(lines), block)
	}
	dev := regexp.MustCompile(`^go run \./cmd/ssrun dev (\S+)\s`).FindStringSubmatch(lines[0])
	if dev == nil {
		t.Fatalf("the first command is not `go run ./cmd/ssrun dev DIR`: %s", lines[0])
	}
	if rules, _ := filepath.Glob(filepath.Join(root, dev[1], "*.lua")); len(rules) == 0 {
		t.Errorf("%s has no rule to run", dev[1])
	}
	const tests = "go vet ./... && go test -race ./..."
	if !strings.HasPrefix(lines[1], tests) {
		t.Fatalf("the second command is not %q: %s", tests, lines[1])
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"\ngo vet ./...\n", "\ngo test -race ./...\n"} {
		if !strings.Contains(string(ci), c) {
			t.Errorf(".ci/run does not run %q, which the README says it does", strings.TrimSpace(c))
		}
	}
}
