package resp

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

type vectors struct {
	Requests []struct {
		Name string
		Wire string
		Args []string
	}
	BadRequests []struct {
		Name string
		Wire string
	} `json:"bad_requests"`
	Replies []struct {
		Wire string
		Kind string
		Str  string
		Int  int64
	}
	BadReplies []struct {
		Name string
		Wire string
	} `json:"bad_replies"`
	Notifications []struct {
		Wire  string
		Op    string
		Value *string
	}
	BadNotifications []struct {
		Name string
		Wire string
	} `json:"bad_notifications"`
}

func loadVectors(t testing.TB) vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("testdata/vectors.json: %v", err)
	}
	if len(v.Requests) == 0 || len(v.Replies) == 0 || len(v.Notifications) == 0 {
		t.Fatal("testdata/vectors.json: missing sections")
	}
	return v
}

func TestRequestVectors(t *testing.T) {
	for _, tc := range loadVectors(t).Requests {
		t.Run(tc.Name, func(t *testing.T) {
			args := make([][]byte, len(tc.Args))
			for i, a := range tc.Args {
				args[i] = []byte(a)
			}
			if got := EncodeRequest(args...); string(got) != tc.Wire {
				t.Errorf("EncodeRequest = %q, want %q", got, tc.Wire)
			}
			if n := RequestSize(args...); n != len(tc.Wire) {
				t.Errorf("RequestSize = %d, want %d", n, len(tc.Wire))
			}
			got, err := ParseRequest([]byte(tc.Wire))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if len(got) != len(tc.Args) {
				t.Fatalf("ParseRequest gave %d args, want %d", len(got), len(tc.Args))
			}
			for i := range got {
				if string(got[i]) != tc.Args[i] {
					t.Errorf("arg %d = %q, want %q", i, got[i], tc.Args[i])
				}
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	for _, tc := range loadVectors(t).BadRequests {
		t.Run(tc.Name, func(t *testing.T) {
			args, err := ParseRequest([]byte(tc.Wire))
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("ParseRequest(%q) = %q, %v; want ErrSyntax", tc.Wire, args, err)
			}
		})
	}
}

func TestReplyVectors(t *testing.T) {
	kinds := map[string]Kind{"simple": KindSimple, "integer": KindInteger, "nil": KindNil, "bulk": KindBulk, "error": KindError}
	for _, tc := range loadVectors(t).Replies {
		t.Run(tc.Wire, func(t *testing.T) {
			r, err := ParseReply([]byte(tc.Wire))
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != kinds[tc.Kind] {
				t.Fatalf("kind = %v, want %s", r.Kind, tc.Kind)
			}
			if string(r.Str) != tc.Str || r.Int != tc.Int {
				t.Fatalf("got %q/%d, want %q/%d", r.Str, r.Int, tc.Str, tc.Int)
			}
			// Re-encode through the writers and compare byte for byte.
			var enc []byte
			switch r.Kind {
			case KindSimple:
				enc = OK
			case KindInteger:
				enc = AppendInt(nil, r.Int)
			case KindNil:
				enc = Nil
			case KindBulk:
				enc = AppendBulk(nil, r.Str)
			case KindError:
				enc = AppendError(nil, string(r.Str))
			}
			if string(enc) != tc.Wire {
				t.Fatalf("re-encoded %q, want %q", enc, tc.Wire)
			}
		})
	}
}

func TestBadReplies(t *testing.T) {
	for _, tc := range loadVectors(t).BadReplies {
		t.Run(tc.Name, func(t *testing.T) {
			if r, err := ParseReply([]byte(tc.Wire)); !errors.Is(err, ErrSyntax) {
				t.Fatalf("ParseReply(%q) = %+v, %v; want ErrSyntax", tc.Wire, r, err)
			}
		})
	}
}

func TestNotifyVectors(t *testing.T) {
	v := loadVectors(t)
	for _, tc := range v.Notifications {
		t.Run(tc.Wire, func(t *testing.T) {
			n, err := ParseNotify([]byte(tc.Wire))
			if err != nil {
				t.Fatal(err)
			}
			if n.Op != tc.Op {
				t.Fatalf("op = %q, want %q", n.Op, tc.Op)
			}
			var enc []byte
			if tc.Value == nil {
				if n.Value != nil {
					t.Fatalf("value = %q, want none", n.Value)
				}
				enc = AppendNotifyDelete(nil)
			} else {
				if n.Value == nil || string(n.Value) != *tc.Value {
					t.Fatalf("value = %q, want %q", n.Value, *tc.Value)
				}
				enc = AppendNotifySet(nil, []byte(*tc.Value))
			}
			if string(enc) != tc.Wire {
				t.Fatalf("encoded %q, want %q", enc, tc.Wire)
			}
		})
	}
	for _, tc := range v.BadNotifications {
		t.Run(tc.Name, func(t *testing.T) {
			if _, err := ParseNotify([]byte(tc.Wire)); !errors.Is(err, ErrSyntax) {
				t.Fatalf("ParseNotify(%q) err = %v, want ErrSyntax", tc.Wire, err)
			}
		})
	}
}

// Every byte value, including CR, LF and NUL, survives a round trip.
func TestBinarySafe(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	key := bytes.Repeat([]byte("\r\n$*"), 1700) // a 6.8 KB key full of framing bytes
	val := bytes.Repeat(all, 256)               // 64 KiB value
	wire := EncodeRequest([]byte("SET"), key, val)
	args, err := ParseRequest(wire)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(args[1], key) || !bytes.Equal(args[2], val) {
		t.Fatal("round trip changed the data")
	}
	r, err := ParseReply(AppendBulk(nil, val))
	if err != nil || !bytes.Equal(r.Str, val) {
		t.Fatalf("bulk reply round trip: %v", err)
	}
	n, err := ParseNotify(AppendNotifySet(nil, val))
	if err != nil || !bytes.Equal(n.Value, val) {
		t.Fatalf("notify round trip: %v", err)
	}
}

func TestParseRequestAliasesInput(t *testing.T) {
	wire := EncodeRequest([]byte("GET"), []byte("k"))
	args, err := ParseRequest(wire)
	if err != nil {
		t.Fatal(err)
	}
	// Appending to an argument must not overwrite the bytes after it.
	_ = append(args[0], 'X')
	if string(wire) != "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" {
		t.Fatalf("append to an argument changed the input: %q", wire)
	}
}

func TestErrorWithoutERRPrefix(t *testing.T) {
	r, err := ParseReply([]byte("-WRONGTYPE bad\r\n"))
	if err != nil || r.Kind != KindError || string(r.Str) != "WRONGTYPE bad" {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func FuzzParseRequest(f *testing.F) {
	v := loadVectors(f)
	for _, r := range v.Requests {
		f.Add([]byte(r.Wire))
	}
	for _, r := range v.BadRequests {
		f.Add([]byte(r.Wire))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		args, err := ParseRequest(b)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error does not wrap ErrSyntax: %v", err)
			}
			return
		}
		if len(args) == 0 {
			t.Fatal("accepted an empty request")
		}
		// Whatever parses re-encodes to the canonical spelling (no leading
		// zeros), which is never longer and parses back to the same args.
		enc := EncodeRequest(args...)
		if len(enc) > len(b) {
			t.Fatalf("re-encoded %q is longer than input %q", enc, b)
		}
		again, err := ParseRequest(enc)
		if err != nil || len(again) != len(args) {
			t.Fatalf("re-parse of %q: %q, %v", enc, again, err)
		}
		for i := range args {
			if !bytes.Equal(again[i], args[i]) {
				t.Fatalf("arg %d changed: %q -> %q", i, args[i], again[i])
			}
		}
	})
}

func FuzzParseReply(f *testing.F) {
	v := loadVectors(f)
	for _, r := range v.Replies {
		f.Add([]byte(r.Wire))
	}
	for _, r := range v.BadReplies {
		f.Add([]byte(r.Wire))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReply(b)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error does not wrap ErrSyntax: %v", err)
			}
			return
		}
		if r.Kind == KindBulk {
			again, err := ParseReply(AppendBulk(nil, r.Str))
			if err != nil || again.Kind != KindBulk || !bytes.Equal(again.Str, r.Str) {
				t.Fatalf("bulk %q did not survive a round trip: %+v, %v", r.Str, again, err)
			}
		}
	})
}

func FuzzParseNotify(f *testing.F) {
	v := loadVectors(f)
	for _, n := range v.Notifications {
		f.Add([]byte(n.Wire))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseNotify(b)
		if err != nil {
			return
		}
		var enc []byte
		switch {
		case n.Value != nil && n.Op == OpSet:
			enc = AppendNotifySet(nil, n.Value)
		case n.Value == nil && n.Op == OpDelete:
			enc = AppendNotifyDelete(nil)
		default:
			return
		}
		again, err := ParseNotify(enc)
		if err != nil || again.Op != n.Op || !bytes.Equal(again.Value, n.Value) {
			t.Fatalf("%+v did not survive a round trip: %+v, %v", n, again, err)
		}
	})
}
