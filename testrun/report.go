package testrun

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Reporter writes results like go test: "--- FAIL: file/case (0.01s)" and
// the differences for each failed case, "=== RUN" and "--- PASS" lines too
// with Verbose, and one summary line per file; with JSON, one JSON object
// per event instead, shaped like go test -json's.
type Reporter struct {
	Out     io.Writer
	Verbose bool
	JSON    bool
}

// event is one line of JSON output (the fields of go test -json's
// test2json events that apply).
type event struct {
	Time    time.Time `json:"Time"`
	Action  string    `json:"Action"`
	Package string    `json:"Package"`
	Test    string    `json:"Test,omitempty"`
	Elapsed *float64  `json:"Elapsed,omitempty"`
	Output  string    `json:"Output,omitempty"`
}

func (r *Reporter) emit(e event) {
	e.Time = time.Now()
	b, _ := json.Marshal(e) // cannot fail: plain fields
	fmt.Fprintf(r.Out, "%s\n", b)
}

func (r *Reporter) start(file, name string) {
	switch {
	case r.JSON:
		r.emit(event{Action: "run", Package: file, Test: name})
	case r.Verbose:
		fmt.Fprintf(r.Out, "=== RUN   %s\n", name)
	}
}

func (r *Reporter) end(file, name string, d time.Duration, problems []string) {
	result, action := "PASS", "pass"
	if len(problems) > 0 {
		result, action = "FAIL", "fail"
	}
	text := ""
	if len(problems) > 0 || r.Verbose {
		text = fmt.Sprintf("--- %s: %s (%.2fs)\n", result, name, d.Seconds())
	}
	for _, p := range problems {
		text += "    " + strings.ReplaceAll(p, "\n", "\n    ") + "\n"
	}
	if !r.JSON {
		fmt.Fprint(r.Out, text)
		return
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		if line != "" {
			r.emit(event{Action: "output", Package: file, Test: name, Output: line})
		}
	}
	s := d.Seconds()
	r.emit(event{Action: action, Package: file, Test: name, Elapsed: &s})
}

func (r *Reporter) file(file string, ran, failed int, d time.Duration) {
	result, action := "ok  ", "pass"
	if failed > 0 {
		result, action = "FAIL", "fail"
	}
	if ran == 0 {
		result = "ok  "
	}
	line := fmt.Sprintf("%s\t%s\t%.3fs\n", result, file, d.Seconds())
	if ran == 0 {
		line = fmt.Sprintf("%s\t%s\t%.3fs [no cases to run]\n", result, file, d.Seconds())
	}
	if !r.JSON {
		fmt.Fprint(r.Out, line)
		return
	}
	s := d.Seconds()
	r.emit(event{Action: "output", Package: file, Output: line})
	r.emit(event{Action: action, Package: file, Elapsed: &s})
}
