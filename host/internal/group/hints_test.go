package group

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/patterns"
)

// A member's published patterns are hostile input to the others: lines
// that do not compile are left out, the rest kept; a line longer than a
// member publishes (more than maxPublished bytes) ends what is read.
func TestParsePatternLinesLeavesOutBadLines(t *testing.T) {
	srcsOf := func(ps []patterns.Pattern) []string {
		var srcs []string
		for _, p := range ps {
			srcs = append(srcs, p.Src)
		}
		return srcs
	}
	got, cut := parsePatternLines([]byte("a/*\n[\n\nb/?"))
	if srcs := srcsOf(got); !slices.Equal(srcs, []string{"a/*", "b/?"}) || cut != 0 {
		t.Errorf("parsed %q, %d bytes left out; want a/* and b/?", srcs, cut)
	}
	long := "a/*\n" + strings.Repeat("*", 70<<10) + "\nb/?"
	got, cut = parsePatternLines([]byte(long))
	if srcs := srcsOf(got); !slices.Equal(srcs, []string{"a/*"}) || cut != len(long)-3 {
		t.Errorf("parsed %q, %d bytes left out; want a/* and the rest (%d bytes) left out", srcs, cut, len(long)-3)
	}
}

// A member publishes at most maxPublished bytes of patterns; a value of a
// megabyte of "a*\n" (a hostile write) gives at most maxMemberPatterns
// patterns, not 349525 each matched against every key a rule writes. A
// value of maxPublished bytes is read whole, and a member's watch warns
// once however many such values come.
func TestParsePatternLinesBoundsAMembersValue(t *testing.T) {
	hostile := []byte(strings.Repeat("a*\n", 1<<20/3))
	got, cut := parsePatternLines(hostile)
	if len(got) > maxMemberPatterns || len(got) == 0 || cut == 0 {
		t.Fatalf("%d patterns (%d bytes left out) from %d lines, want at most %d", len(got), cut, 1<<20/3, maxMemberPatterns)
	}
	var lines []string // distinct, sorted: what a host publishes
	for i := 0; ; i++ {
		l := fmt.Sprintf("k%d", i)
		if len(strings.Join(lines, "\n"))+1+len(l) > maxPublished {
			break
		}
		lines = append(lines, l)
	}
	full := strings.Join(lines, "\n")
	if got, cut := parsePatternLines([]byte(full)); len(got) != len(lines) || cut != 0 {
		t.Errorf("a value of %d bytes (at most %d) gave %d of its %d patterns, %d bytes left out", len(full), maxPublished, len(got), len(lines), cut)
	}

	var logs bytes.Buffer
	gh := newHints(&Ownership{name: "g", prefix: "$ssrun/"}, "me", nil, slog.New(slog.NewTextHandler(&logs, nil)), time.Now)
	w := &memberPatterns{gh: gh, id: "other"}
	gh.watching["other"] = w
	for range 3 {
		w.Enqueue(mailbox.Delivery{Ev: abi.Event{Key: gh.patternsKey("other"), Op: abi.OpSet, Value: hostile}})
	}
	if n := len(gh.PatternsOf("other")); n > maxMemberPatterns || n == 0 {
		t.Errorf("a notified value gave %d patterns, want at most %d", n, maxMemberPatterns)
	}
	if n := strings.Count(logs.String(), "longer than a member publishes"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

// A member rings another for a key once: again only after a rule of its
// host deleted the key (Unring), or, for a key written with a TTL, once
// the TTL has passed (it may have expired, and the other member let it
// go). A key no pattern of the member matches is never rung for.
func TestDoorbellsRingOnceUntilDeletedOrExpired(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	gh := newHints(&Ownership{name: "g", prefix: "$ssrun/"}, "me", nil, slog.New(slog.DiscardHandler), func() time.Time { return now })
	pat, err := patterns.Compile("dev/*")
	if err != nil {
		t.Fatal(err)
	}
	gh.setPatterns("other", []patterns.Pattern{pat})
	bell := []string{gh.DoorbellKey("other")}
	ring := func(what, key string, ttl time.Duration, want []string) {
		t.Helper()
		if got := gh.Doorbells(key, ttl); !slices.Equal(got, want) {
			t.Fatalf("%s: Doorbells(%q, %v) = %q, want %q", what, key, ttl, got, want)
		}
	}
	ring("not matched", "other/1", 0, nil)
	ring("first write", "dev/1", 0, bell)
	ring("second write", "dev/1", 0, nil)
	gh.Unring("dev/1")
	ring("after a deletion", "dev/1", 0, bell)
	ring("no TTL: for good", "dev/1", time.Second, nil)

	ring("first write with a TTL", "dev/2", time.Second, bell)
	now = now.Add(999 * time.Millisecond)
	ring("within the TTL", "dev/2", time.Second, nil)
	now = now.Add(time.Millisecond)
	ring("the TTL passed", "dev/2", 0, bell)
	now = now.Add(time.Hour)
	ring("written again without a TTL: for good", "dev/2", 0, nil)
}

// setPatterns sets member id's patterns, as a read of its key would.
func (gh *Hints) setPatterns(id string, ps []patterns.Pattern) {
	gh.mu.Lock()
	defer gh.mu.Unlock()
	gh.others[id] = newPatternSet(ps)
}
