package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/glob"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// scanStore returns a store on clk with keys set.
func scanStore(t testing.TB, clk *clockT, keys ...string) *Store {
	t.Helper()
	s := New(clk.now, Quota{Keys: -1, Bytes: -1})
	for _, k := range keys {
		mustSet(t, s, k, "v")
	}
	return s
}

func mustSet(t testing.TB, s *Store, key, value string) {
	t.Helper()
	ts := hlc.NewClock("t", s.now).Tick().String()
	if r := s.Execute(Request{Payload: resp.EncodeRequest([]byte("SET"), []byte(key), []byte(value)), TS: &ts}); string(r.Payload) != "+OK\r\n" {
		t.Fatalf("SET %s: %q", key, r.Payload)
	}
}

// scanPage runs one SCAN request.
func scanPage(t testing.TB, s *Store, req Request, pattern string, token []byte) (keys []string, next []byte, errText string) {
	t.Helper()
	args := [][]byte{[]byte("SCAN"), []byte(pattern)}
	if token != nil {
		args = append(args, token)
	}
	req.Payload = resp.EncodeRequest(args...)
	r := s.Execute(req)
	if bytes.HasPrefix(r.Payload, []byte("-ERR ")) {
		return nil, nil, strings.TrimSuffix(string(r.Payload[5:]), "\r\n")
	}
	if req.MaxReplyBytes > 0 && len(r.Payload) > req.MaxReplyBytes {
		t.Fatalf("reply of %d bytes, over the bound of %d", len(r.Payload), req.MaxReplyBytes)
	}
	kb, tok, more, err := resp.ParseScanReply(r.Payload)
	if err != nil {
		t.Fatalf("SCAN %s: reply %q: %v", pattern, r.Payload, err)
	}
	for _, k := range kb {
		keys = append(keys, string(k))
	}
	if more {
		next = slices.Clone(tok)
	}
	return keys, next, ""
}

// scanAll pages through pattern and returns every key and the number of
// pages.
func scanAll(t testing.TB, s *Store, req Request, pattern string, between func()) (keys []string, pages int) {
	t.Helper()
	var token []byte
	for {
		page, next, errText := scanPage(t, s, req, pattern, token)
		if errText != "" {
			t.Fatalf("SCAN %s: -ERR %s", pattern, errText)
		}
		if len(page) > scanPageKeys {
			t.Fatalf("a page of %d keys", len(page))
		}
		keys, pages = append(keys, page...), pages+1
		if next == nil {
			return keys, pages
		}
		token = next
		if between != nil {
			between()
		}
	}
}

func TestScanPagesEveryMatchingKeyOnceInOrder(t *testing.T) {
	clk := &clockT{t: time.Now()}
	var want, all []string
	for i := range 2500 {
		k := fmt.Sprintf("thermostats/%04d/setPoint", i)
		want = append(want, k)
		all = append(all, k, fmt.Sprintf("thermostats/%04d/mode", i), fmt.Sprintf("valves/%04d", i))
	}
	s := scanStore(t, clk, all...)
	got, pages := scanAll(t, s, Request{}, "thermostats/*/setPoint", nil)
	if !slices.Equal(got, want) {
		t.Fatalf("%d keys listed, want the %d setPoints in order", len(got), len(want))
	}
	if pages < 3 {
		t.Fatalf("%d pages for 2,500 keys, want pages of at most %d", pages, scanPageKeys)
	}
	if got, _ := scanAll(t, s, Request{}, "thermostats/000?/mode", nil); len(got) != 10 || got[0] != "thermostats/0000/mode" {
		t.Fatalf("thermostats/000?/mode: %q", got)
	}
	if got, _ := scanAll(t, s, Request{}, "nothing*", nil); len(got) != 0 {
		t.Fatalf("nothing*: %q", got)
	}
}

// A page examines a bounded number of keys: a pattern matching few keys
// of many gives empty pages with tokens, which the client follows.
func TestScanPageWorkIsBounded(t *testing.T) {
	clk := &clockT{t: time.Now()}
	var keys []string
	for i := range 3 * scanPageWork {
		keys = append(keys, fmt.Sprintf("k%06d", i))
	}
	s := scanStore(t, clk, append(keys, "k999999-last")...)
	got, pages := scanAll(t, s, Request{}, "*-last", nil)
	if !slices.Equal(got, []string{"k999999-last"}) || pages < 3 {
		t.Fatalf("*-last: %q in %d pages, want the one key after at least 3 pages of bounded work", got, pages)
	}
	// A long pattern examines fewer keys a page (its matches cost more),
	// and the scan still ends: 1,000 keys would be one page of a short one.
	few := scanStore(t, clk, keys[:1000]...)
	long := strings.Repeat("*?", 8<<10)
	if _, pages := scanAll(t, few, Request{}, long, nil); pages < 3 {
		t.Fatalf("a 16 KiB pattern took %d pages over 1,000 keys: its pages are not bounded by its cost", pages)
	}
}

func TestScanReplyBoundedInBytes(t *testing.T) {
	clk := &clockT{t: time.Now()}
	var keys []string
	for i := range 300 {
		keys = append(keys, fmt.Sprintf("key/%03d/%s", i, strings.Repeat("x", i)))
	}
	s := scanStore(t, clk, append(keys, "key/"+strings.Repeat("y", 5000))...)
	req := Request{MaxReplyBytes: 2000}
	got, _ := scanAll(t, s, req, "key/*", nil) // scanPage checks each reply's size
	if !slices.Equal(got, keys) {
		t.Fatalf("%d keys, want the 300 that fit a reply (the 5 KB key does not)", len(got))
	}
}

func TestScanRefusesBadTokens(t *testing.T) {
	clk := &clockT{t: time.Now()}
	var keys []string
	for i := range 1500 {
		keys = append(keys, fmt.Sprintf("a/%04d", i))
	}
	s := scanStore(t, clk, keys...)
	_, token, _ := scanPage(t, s, Request{}, "a/*", nil)
	if token == nil {
		t.Fatal("no token after the first page of 1,500 keys")
	}
	forged := slices.Clone(token)
	forged[len(forged)-1] ^= 0x20 // resume elsewhere
	other := scanStore(t, clk, keys...)
	_, otherToken, _ := scanPage(t, other, Request{}, "a/*", nil)
	for name, tok := range map[string][]byte{
		"garbage":         []byte("not a token"),
		"empty":           {},
		"truncated":       token[:10],
		"bad hex":         append([]byte("1;"), bytes.Repeat([]byte("z"), 33)...),
		"forged key":      forged,
		"another store's": otherToken,
	} {
		if _, _, errText := scanPage(t, s, Request{}, "a/*", tok); errText != wire.ErrTextSyntax {
			t.Errorf("%s token: %q, want %q", name, errText, wire.ErrTextSyntax)
		}
	}
	if _, _, errText := scanPage(t, s, Request{}, "a/00*", token); errText != wire.ErrTextSyntax {
		t.Errorf("a token of another pattern: %q, want %q", errText, wire.ErrTextSyntax)
	}
	for _, bad := range []string{"[", `\`, "a[b-a]"} {
		if _, _, errText := scanPage(t, s, Request{}, bad, nil); errText != wire.ErrTextSyntax {
			t.Errorf("pattern %q: %q", bad, errText)
		}
	}
}

func TestScanListsOnlyReadableLiveKeys(t *testing.T) {
	clk := &clockT{t: time.Now()}
	s := scanStore(t, clk, "mine/1", "mine/2", "theirs/1")
	ts := hlc.NewClock("t", s.now).Tick().String()
	s.Execute(Request{Payload: resp.EncodeRequest([]byte("SET"), []byte("mine/short"), []byte("v"), []byte("PX"), []byte("1000")), TS: &ts})
	allow := func(_ Access, key []byte) bool { return bytes.HasPrefix(key, []byte("mine/")) }
	if got, _ := scanAll(t, s, Request{Allow: allow}, "*", nil); !slices.Equal(got, []string{"mine/1", "mine/2", "mine/short"}) {
		t.Fatalf("with an ACL: %q", got)
	}
	clk.advance(2 * time.Second)
	if got, _ := scanAll(t, s, Request{Allow: allow}, "*", nil); !slices.Equal(got, []string{"mine/1", "mine/2"}) {
		t.Fatalf("after mine/short expired: %q", got)
	}
}

// Every key present for the whole scan is listed exactly once while other
// clients set and delete keys around it, whatever the page bounds.
func TestScanExactlyOnceUnderConcurrentWrites(t *testing.T) {
	clk := &clockT{t: time.Now()}
	const n = 10_000
	var stable []string
	for i := range n {
		stable = append(stable, fmt.Sprintf("k/%05d/stable", i))
	}
	s := scanStore(t, clk, stable...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("k/%05d/churn-%d", rng.IntN(n), w)
				ts := hlc.NewClock(fmt.Sprint("w", w), s.now).Tick().String()
				cmd := resp.EncodeRequest([]byte("SET"), []byte(k), []byte("x"))
				if rng.IntN(2) == 0 {
					cmd = resp.EncodeRequest([]byte("DEL"), []byte(k))
				}
				s.Execute(Request{Payload: cmd, TS: &ts})
				writes.Add(1)
			}
		}()
	}
	for _, bound := range []int{0, 3000} {
		got, pages := scanAll(t, s, Request{MaxReplyBytes: bound}, "k/*", runtime.Gosched)
		seen := map[string]int{}
		for _, k := range got {
			seen[k]++
		}
		for _, k := range stable {
			if seen[k] != 1 {
				t.Fatalf("bound %d: %s listed %d times (%d pages, %d writes meanwhile)", bound, k, seen[k], pages, writes.Load())
			}
		}
	}
	close(stop)
	wg.Wait()
	if writes.Load() == 0 {
		t.Fatal("no concurrent writes: the test did not test concurrency")
	}
}

// A recovered store scans as the one that wrote the data.
func TestScanAfterRecovery(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: time.Now()}
	s := New(clk.now, Quota{Keys: -1, Bytes: -1})
	if _, err := s.OpenData(PersistConfig{Dir: dir, Policy: FsyncNever}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 1200 {
		k := fmt.Sprintf("p/%04d", i)
		mustSet(t, s, k, "v")
		want = append(want, k)
	}
	before, _ := scanAll(t, s, Request{}, "p/*", nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := New(clk.now, Quota{Keys: -1, Bytes: -1})
	if _, err := r.OpenData(PersistConfig{Dir: dir, Policy: FsyncNever}); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	after, _ := scanAll(t, r, Request{}, "p/*", nil)
	if !slices.Equal(before, want) || !slices.Equal(after, want) {
		t.Fatalf("before %d keys, after recovery %d, want %d", len(before), len(after), len(want))
	}
}

// FuzzScan: any pattern and token give an -ERR or a well-formed reply, and
// never a key that does not match.
func FuzzScan(f *testing.F) {
	clk := &clockT{t: time.Now()}
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("f/%02d/%c", i, 'a'+i%26))
	}
	s := scanStore(f, clk, keys...)
	_, tok, _ := scanPage(f, s, Request{MaxReplyBytes: 300}, "f/*", nil)
	for _, c := range []struct{ pattern, token string }{{"f/*", ""}, {"f/*", string(tok)}, {"*[", ""}, {"f/?/a", "1;x"}, {strings.Repeat("*?", 100), ""}} {
		f.Add(c.pattern, []byte(c.token))
	}
	f.Fuzz(func(t *testing.T, pattern string, token []byte) {
		if pattern == "" {
			return
		}
		args := [][]byte{[]byte("SCAN"), []byte(pattern)}
		if len(token) > 0 {
			args = append(args, token)
		}
		r := s.Execute(Request{Payload: resp.EncodeRequest(args...), MaxReplyBytes: 300})
		if bytes.HasPrefix(r.Payload, []byte("-ERR ")) {
			return
		}
		got, _, _, err := resp.ParseScanReply(r.Payload)
		if err != nil {
			t.Fatalf("reply %q: %v", r.Payload, err)
		}
		g, err := glob.Compile(pattern, nil)
		if err != nil {
			t.Fatalf("pattern %q does not compile, yet SCAN answered %q", pattern, r.Payload)
		}
		for _, k := range got {
			if !slices.Contains(keys, string(k)) || !g.Match(k, nil) {
				t.Fatalf("listed %q for %q: not a key, or not matching", k, pattern)
			}
		}
	})
}
