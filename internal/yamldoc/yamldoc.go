// Package yamldoc keeps ssrun's YAML files (ssrun.yaml, test files, the
// broker's ACL file) to one document each. A decoder reads the first
// document and stops: a second one, after "---", would be dropped unread,
// and with it the settings, cases or permissions it holds.
package yamldoc

import (
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// SecondError is a document after the first that is not empty.
type SecondError struct {
	Line int // where its content starts
}

func (e *SecondError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg())
}

// Msg is the error without its line.
func (e *SecondError) Msg() string {
	return "a second YAML document (after ---): the file is read as one document"
}

// Rest reads what follows the first document in dec, which must be
// nothing or empty documents (a trailing "---", or one with only
// comments): a *SecondError otherwise, or the decoding error.
func Rest(dec *yaml.Decoder) error {
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(next.Content) > 0 && next.Content[0].Tag != "!!null" {
			return &SecondError{Line: next.Content[0].Line}
		}
	}
}
