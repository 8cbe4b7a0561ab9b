package resp

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// The byte vectors of the SDK's SCAN tests (scan.md) and every malformed
// shape the SDK rejects.
func TestScanVectors(t *testing.T) {
	if got := EncodeRequest([]byte("SCAN"), []byte("key*")); string(got) != "*2\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n" {
		t.Errorf("first page request: %q", got)
	}
	if got := EncodeRequest([]byte("SCAN"), []byte("key*"), []byte("\x00\xffx")); string(got) != "*3\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n$3\r\n\x00\xffx\r\n" {
		t.Errorf("next page request: %q", got)
	}
	for _, c := range []struct {
		reply string
		keys  []string
		token string
		more  bool
	}{
		{"*1\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n", []string{"key1", "key2"}, "", false},
		{"*2\r\n*0\r\n$3\r\n\x00\xffx\r\n", nil, "\x00\xffx", true},
		{"*1\r\n*0\r\n", nil, "", false},
		{"*2\r\n*1\r\n$0\r\n\r\n$4\r\n1;1;\r\n", []string{""}, "1;1;", true},
	} {
		keys, token, more, err := ParseScanReply([]byte(c.reply))
		if err != nil || more != c.more || string(token) != c.token || fmt.Sprint(strs(keys)) != fmt.Sprint(c.keys) {
			t.Errorf("%q: keys %q token %q more %v err %v", c.reply, keys, token, more, err)
		}
		bk := make([][]byte, len(c.keys))
		for i, k := range c.keys {
			bk[i] = []byte(k)
		}
		var tok []byte
		if c.more {
			tok = []byte(c.token)
		}
		if got := AppendScanReply(nil, bk, tok); string(got) != c.reply {
			t.Errorf("AppendScanReply: %q, want %q", got, c.reply)
		}
	}
	for _, bad := range []string{
		"*0\r\n",
		"*3\r\n*0\r\n$1\r\nx\r\n$1\r\ny\r\n",
		"*1\r\n$4\r\nkey1\r\n",
		"*1\r\n*-1\r\n",
		"*1\r\n*1\r\n$-1\r\n",
		"*1\r\n*1\r\n$5\r\nkey1\r\n",
		"*1\r\n*1\r\n$3\r\nkey1\r\n",
		"*2\r\n*0\r\n",
		"*2\r\n*0\r\n$-1\r\n",
		"*1\r\n*0\r\nx",
		"+OK\r\n",
		"",
		"*1\r\n*2\r\n$1\r\na\r\n",
	} {
		if _, _, _, err := ParseScanReply([]byte(bad)); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v, want a syntax error", bad, err)
		}
	}
}

func strs(b [][]byte) []string {
	var out []string
	for _, k := range b {
		out = append(out, string(k))
	}
	return out
}

// FuzzScanReply: ParseScanReply never panics, and what it accepts encodes
// to a reply that parses to the same keys and token.
func FuzzScanReply(f *testing.F) {
	for _, s := range []string{"*1\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n", "*2\r\n*0\r\n$3\r\n\x00\xffx\r\n", "*1\r\n*-1\r\n", "*2\r\n*1\r\n$9999999999\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, token, more, err := ParseScanReply(b)
		if err != nil {
			return
		}
		if !more {
			token = nil
		}
		enc := AppendScanReply(nil, keys, token)
		keys2, token2, more2, err := ParseScanReply(enc)
		if err != nil || more2 != more || !bytes.Equal(token2, token) || fmt.Sprint(strs(keys2)) != fmt.Sprint(strs(keys)) {
			t.Fatalf("%q parsed to %q %q; its encoding %q parses to %q %q (%v)", b, keys, token, enc, keys2, token2, err)
		}
	})
}
