package group

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host/internal/patterns"
)

// BenchmarkDoorbells is the cost a rule's write pays in a group: its key
// matched against the patterns of every other member (here 4 members of
// 1000 patterns each, as 1000 rules watching a site's devices would
// publish), for a key that matches one member's pattern and was rung for
// already (the common case: a key written again).
func BenchmarkDoorbells(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	gh := newHints(&Ownership{name: "g", prefix: "$ssrun/"}, "me", nil, slog.New(slog.DiscardHandler), func() time.Time { return now })
	for m := range 4 {
		var ps []patterns.Pattern
		for i := range 1000 {
			p, err := patterns.Compile(fmt.Sprintf("site/%d/dev/%d/*", m, i))
			if err != nil {
				b.Fatal(err)
			}
			ps = append(ps, p)
		}
		gh.setPatterns(fmt.Sprintf("m%d", m), ps)
	}
	key := "site/2/dev/517/temperature"
	if bells := gh.Doorbells(key, 0); len(bells) != 1 {
		b.Fatalf("first write rang %q, want one member", bells)
	}
	b.ReportAllocs()
	for b.Loop() {
		if bells := gh.Doorbells(key, 0); len(bells) != 0 {
			b.Fatalf("rang %q again", bells)
		}
	}
}

// BenchmarkParseMemberPatterns is what a member pays when another member's
// patterns change: reading its 1000 published patterns (and indexing
// them).
func BenchmarkParseMemberPatterns(b *testing.B) {
	gh := newHints(&Ownership{name: "g", prefix: "$ssrun/"}, "me", nil, slog.New(slog.DiscardHandler), time.Now)
	w := &memberPatterns{gh: gh, id: "other"}
	var v []byte
	for i := range 1000 {
		v = fmt.Appendf(v, "site/%d/dev/*\n", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = w.parse(v)
	}
}
