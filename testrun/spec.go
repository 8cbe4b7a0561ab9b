package testrun

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ssrun/ssrun/internal/safefile"
	"github.com/ssrun/ssrun/internal/yamldoc"
)

// File is one test file.
type File struct {
	Path string `yaml:"-"`
	// Rules are the rule files under test, relative to the test file's
	// folder; every rule in the folder when empty.
	Rules []string `yaml:"rules"`
	// Start is the virtual clock's start (RFC 3339); DefaultStart when empty.
	Start string `yaml:"start"`
	Cases []Case `yaml:"cases"`

	start time.Time
}

// DefaultStart is where the virtual clock starts unless a file says.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Case is one test: an initial store and steps.
type Case struct {
	Name string `yaml:"name"`
	// Store is the store's content before the rules start.
	Store Values `yaml:"store"`
	// Seed seeds the rules' random numbers (Lua's math.random); 0 when
	// not given.
	Seed  uint64 `yaml:"seed"`
	Steps []Step `yaml:"steps"`
	Line  int    `yaml:"-"`
}

// Step is one thing that happens, and what is expected after it. Exactly
// one of the actions is set.
type Step struct {
	Set      KVs     `yaml:"set"`       // keys set from outside, in order
	Delete   Keys    `yaml:"delete"`    // keys deleted from outside, in order
	Advance  string  `yaml:"advance"`   // virtual time passes (a Go duration)
	Store    string  `yaml:"store"`     // "down" or "up"
	LoseLock string  `yaml:"lose_lock"` // the holder of this lock loses it
	Fence    string  `yaml:"fence"`     // another host takes this lock unbeknown to its holder
	Reload   KVs     `yaml:"reload"`    // rule file: a file (next to the test file) with its new version
	Expect   *Expect `yaml:"expect"`
	Line     int     `yaml:"-"`

	advance time.Duration
}

// Expect is what must hold after a step; only the fields given are checked.
type Expect struct {
	// Writes are the writes the rules made during the step, in order:
	// "SET key value" or "DEL key" (del and vdel). An empty list expects none.
	Writes *[]string `yaml:"writes"`
	// Store: each key's value, or null for absent.
	Store map[string]*string `yaml:"store"`
	// Logs: each must be a substring of a line logged during the step
	// (rule logs and handler failures).
	Logs []string `yaml:"logs"`
	// NoLogs: none may be a substring of a line logged during the step.
	NoLogs []string `yaml:"no_logs"`
	// Timers: by rule file name, the names of its pending timers.
	Timers map[string][]string `yaml:"timers"`
	// Status: by rule file name, its handled and failed counts so far.
	Status map[string]Counts `yaml:"status"`
}

// Counts are a rule's event counts since the case began (counts.go).
type Counts struct {
	Handled int `yaml:"handled"`
	Failed  int `yaml:"failed"`
	// Coalesced and Dropped, checked when given: changes conflated by key
	// in the rule's full mailbox, and changes dropped (host.RuleStatus).
	Coalesced *int `yaml:"coalesced"`
	Dropped   *int `yaml:"dropped"`
}

// KV is a key and value; KVs keep the order of a YAML mapping.
type KV struct{ Key, Value string }

// KVs is an ordered YAML mapping of keys to values.
type KVs []KV

// UnmarshalYAML keeps the mapping's order.
func (kv *KVs) UnmarshalYAML(n *yaml.Node) error {
	return eachValue(n, func(k, v string) { *kv = append(*kv, KV{k, v}) })
}

// Values is a YAML mapping of keys to values (a case's store).
type Values map[string]string

// UnmarshalYAML refuses what is not a value, null among them.
func (vs *Values) UnmarshalYAML(n *yaml.Node) error {
	*vs = Values{}
	return eachValue(n, func(k, v string) { (*vs)[k] = v })
}

// eachValue passes each key and value of the mapping n to add. A value
// must be a scalar other than null (null, ~ or nothing): YAML would read it
// as the empty string, while an expected store's null means "absent".
func eachValue(n *yaml.Node, add func(k, v string)) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of keys to values", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case v.Kind != yaml.ScalarNode:
			return fmt.Errorf("line %d: %s: want a value (a string)", v.Line, k.Value)
		case v.Tag == "!!null":
			return fmt.Errorf("line %d: %s: null is not a value: write \"\" for the empty value or \"null\" for the text (a key is absent when left out, and deleted by a delete step)", v.Line, k.Value)
		}
		add(k.Value, v.Value)
	}
	return nil
}

// Keys is one key or a list of keys.
type Keys []string

// UnmarshalYAML accepts a single key as well as a list.
func (k *Keys) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*k = Keys{n.Value}
		return nil
	}
	return n.Decode((*[]string)(k))
}

// strictFields refuses a mapping key of n that is no yaml field of v's
// struct type: a node's own Decode (used by the UnmarshalYAML methods)
// does not inherit the decoder's KnownFields.
func strictFields(n *yaml.Node, v any, what string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s: want a mapping", n.Line, what)
	}
	t := reflect.TypeOf(v).Elem()
	var names []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			names = append(names, tag)
		}
	}
	for i := 0; i < len(n.Content); i += 2 {
		if k := n.Content[i]; !slices.Contains(names, k.Value) {
			return fmt.Errorf("line %d: %s: unknown field %q (want one of %s)", k.Line, what, k.Value, strings.Join(names, ", "))
		}
	}
	return nil
}

// decodeStrict decodes n into v (a type without an UnmarshalYAML of its
// own), refusing fields v does not have (strictFields).
func decodeStrict(n *yaml.Node, v any, what string) error {
	if err := strictFields(n, v, what); err != nil {
		return err
	}
	return n.Decode(v)
}

// UnmarshalYAML refuses unknown fields.
func (e *Expect) UnmarshalYAML(n *yaml.Node) error {
	type plain Expect
	return decodeStrict(n, (*plain)(e), "expect")
}

// UnmarshalYAML refuses unknown fields.
func (c *Counts) UnmarshalYAML(n *yaml.Node) error {
	type plain Counts
	return decodeStrict(n, (*plain)(c), "status")
}

// UnmarshalYAML records the step's line.
func (s *Step) UnmarshalYAML(n *yaml.Node) error {
	type plain Step
	if err := decodeStrict(n, (*plain)(s), "step"); err != nil {
		return err
	}
	s.Line = n.Line
	return nil
}

// UnmarshalYAML records the case's line.
func (c *Case) UnmarshalYAML(n *yaml.Node) error {
	type plain Case
	if err := decodeStrict(n, (*plain)(c), "case"); err != nil {
		return err
	}
	c.Line = n.Line
	return nil
}

// MaxTestFileBytes bounds a test file; a larger one is refused.
const MaxTestFileBytes = 16 << 20

// Load reads and checks the test file at path. Errors name the file and line.
// What is not a regular file (a named pipe, a device) or is larger than
// MaxTestFileBytes is refused without reading it.
func Load(path string) (*File, error) {
	src, err := safefile.Read(path, MaxTestFileBytes)
	if err != nil {
		return nil, err
	}
	return Parse(path, src)
}

// Parse decodes and checks a test file's content; path names it in errors.
func Parse(path string, src []byte) (*File, error) {
	f := &File{Path: path}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty test file", path)
		}
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := yamldoc.Rest(dec); err != nil { // else dropped unread: its cases would never run
		if se := (*yamldoc.SecondError)(nil); errors.As(err, &se) {
			return nil, fmt.Errorf("%s: %w; put every case in the first one's cases: list", path, err)
		}
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func (f *File) check() error {
	f.start = DefaultStart
	if f.Start != "" {
		t, err := time.Parse(time.RFC3339, f.Start)
		if err != nil {
			return fmt.Errorf("start %q: want RFC 3339 time such as 2026-01-01T00:00:00Z", f.Start)
		}
		f.start = t
	}
	if len(f.Cases) == 0 {
		return errors.New("no cases")
	}
	names := map[string]int{}
	for i := range f.Cases {
		c := &f.Cases[i]
		if c.Name == "" {
			return fmt.Errorf("line %d: case without a name", c.Line)
		}
		if l, dup := names[c.Name]; dup {
			return fmt.Errorf("line %d: case %q already at line %d", c.Line, c.Name, l)
		}
		names[c.Name] = c.Line
		if len(c.Steps) == 0 {
			return fmt.Errorf("line %d: case %q has no steps", c.Line, c.Name)
		}
		for j := range c.Steps {
			if err := c.Steps[j].check(); err != nil {
				return fmt.Errorf("line %d: case %q, step %d: %w", c.Steps[j].Line, c.Name, j+1, err)
			}
		}
	}
	return nil
}

func (s *Step) check() error {
	n := 0
	for _, set := range []bool{len(s.Set) > 0, len(s.Delete) > 0, s.Advance != "", s.Store != "", s.LoseLock != "", s.Fence != "", len(s.Reload) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("want exactly one of set, delete, advance, store, lose_lock, fence, reload")
	}
	for _, kv := range s.Reload {
		if kv.Key != filepath.Base(kv.Key) || kv.Value != filepath.Base(kv.Value) {
			return fmt.Errorf("reload %s: %s: want the names of a rule file and of a file next to the test file", kv.Key, kv.Value)
		}
	}
	if s.Advance != "" {
		d, err := time.ParseDuration(s.Advance)
		if err != nil || d < 0 {
			return fmt.Errorf("advance %q: want a duration such as 500ms or 5m", s.Advance)
		}
		s.advance = d
	}
	if s.Store != "" && s.Store != "down" && s.Store != "up" {
		return fmt.Errorf("store %q: want down or up", s.Store)
	}
	if s.Expect != nil && s.Expect.Writes != nil {
		for _, w := range *s.Expect.Writes {
			if !strings.HasPrefix(w, "SET ") && !strings.HasPrefix(w, "DEL ") {
				return fmt.Errorf("writes: %q: want \"SET key value\" or \"DEL key\"", w)
			}
		}
	}
	return nil
}

// String describes the step's action for failure messages.
func (s *Step) String() string {
	switch {
	case len(s.Set) > 0:
		var b []string
		for _, kv := range s.Set {
			b = append(b, fmt.Sprintf("%s=%q", kv.Key, kv.Value))
		}
		return "set " + strings.Join(b, " ")
	case len(s.Delete) > 0:
		return "delete " + strings.Join(s.Delete, " ")
	case s.Advance != "":
		return "advance " + s.Advance
	case s.Store != "":
		return "store " + s.Store
	case s.LoseLock != "":
		return "lose_lock " + s.LoseLock
	case len(s.Reload) > 0:
		var b []string
		for _, kv := range s.Reload {
			b = append(b, kv.Key+"="+kv.Value)
		}
		return "reload " + strings.Join(b, " ")
	default:
		return "fence " + s.Fence
	}
}
