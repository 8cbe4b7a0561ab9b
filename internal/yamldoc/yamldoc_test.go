package yamldoc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// rest decodes src's first document and returns Rest's verdict.
func rest(t *testing.T, src string) error {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		t.Fatalf("first document of %q: %v", src, err)
	}
	return Rest(dec)
}

// Empty documents after the first pass; one with content is refused at
// the line its content starts; a malformed one gives its decoding error.
func TestRest(t *testing.T) {
	for _, src := range []string{"a: 1\n", "a: 1\n---\n", "a: 1\n---\n# only a comment\n", "a: 1\n...\n", "a: 1\n---\n---\n"} {
		if err := rest(t, src); err != nil {
			t.Errorf("Rest after %q: %v", src, err)
		}
	}
	for src, line := range map[string]int{"a: 1\n---\nb: 2\n": 3, "a: 1\n---\n\n# c\nb: [1]\n": 5, "a: 1\n---\n---\n- x\n": 4} {
		var se *SecondError
		if err := rest(t, src); !errors.As(err, &se) || se.Line != line {
			t.Errorf("Rest after %q: %v, want a second document at line %d", src, err, line)
		}
	}
	if err := rest(t, "a: 1\n---\nb: [\n"); err == nil {
		t.Error("Rest of a malformed second document: nil")
	} else if errors.As(err, new(*SecondError)) {
		t.Errorf("Rest of a malformed second document: %v, want the decoding error", err)
	}
}
