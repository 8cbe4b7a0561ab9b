package assemblyscript

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// FuzzKeysRecord: the SDK's keys accepts exactly the result records
// abi.DecodeKeys accepts, with as many keys, refuses the others as a
// malformed record (INTERNAL, and the message says so), and never traps,
// whether the record fits the SDK's buffer or comes through `result`.
func FuzzKeysRecord(f *testing.F) {
	f.Add(abi.AppendKeys(nil, []string{"a/1", "a/\x00\xff", "a/é"}))
	f.Add(abi.AppendKeys(nil, nil))
	f.Add(abi.AppendKeys(nil, []string{strings.Repeat("k", 20<<10)})) // through `result`
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 1})
	g := newRawRule(f)
	cmd := abi.AppendEvent(nil, ruletest.Command("keys", "p/*", "0"))
	f.Fuzz(func(t *testing.T, rec []byte) {
		g.logs, g.keysRec = g.logs[:0], rec
		rc, err := g.deliver(cmd)
		if err != nil || rc != 0 || len(g.logs) != 1 {
			t.Fatalf("record %q: rc %d, %v; logs %q", rec, rc, err, g.logs)
		}
		keys, decodeErr := abi.DecodeKeys(rec)
		want := fmt.Sprintf("report keys status=OK msg=\"\" n=%d keys=[", len(keys))
		if decodeErr != nil {
			want = `report keys status=INTERNAL msg="keys \"p/*\": malformed result record" n=0 keys=[]`
		}
		if !strings.HasPrefix(g.logs[0], want) {
			t.Fatalf("record %q (%v): %q, want %q...", rec, decodeErr, g.logs[0], want)
		}
	})
}
