package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestDocsLinkOnlyIntoTheRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	external := regexp.MustCompile(`(?i)\b(?:https?|ftp)://[^\s)>\]"'` + "`" + `]+`)
	relative := regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)
	for _, p := range docs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range external.FindAllString(string(b), -1) {
			t.Errorf("%s links outside the repository: %s (put what it says in docs/)", p, l)
		}
		for _, m := range relative.FindAllStringSubmatch(string(b), -1) {
			if strings.Contains(m[1], ":") {
				continue // a scheme, reported above
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), m[1])); err != nil {
				t.Errorf("%s links to %s, which is not in the repository", p, m[1])
			}
		}
	}
}
