package assemblyscript

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// boundaryTexts are texts around the edges of the SDK's text conversions:
// the ASCII fast paths (assembly/ascii.ts) work 16 units at a time, a text
// shorter than 16 in one shifted load, a longer one in chunks ending with
// an overlapping one; a non-ASCII unit anywhere sends the text to the
// general path; arguments fit the 4 KiB static area (ASCII: 1 byte per
// unit, else up to 3) or get a buffer of their own.
func boundaryTexts() []string {
	const pattern = "abcdefghijklmnopqrstuvwxyz0123456789-/_:.ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	ascii := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteByte(pattern[i%len(pattern)])
		}
		return b.String()
	}
	var out []string
	for _, n := range []int{0, 1, 2, 7, 8, 9, 14, 15, 16, 17, 31, 32, 33, 47, 48, 49, 100} {
		a := ascii(n)
		out = append(out, a)
		if n == 0 {
			continue
		}
		// Non-ASCII first, in the middle and last; DEL and NUL are ASCII.
		for _, pos := range []int{0, n / 2, n - 1} {
			for _, r := range []string{"é", "€", "\U0001d11e", "\x7f", "\x00"} {
				out = append(out, a[:pos]+r+a[pos+1:])
			}
		}
	}
	// The static area: 4096 ASCII bytes fit, 4097 do not; 1365 units fit
	// whatever they are, 1366 of which one is not ASCII do not.
	for _, n := range []int{4095, 4096, 4097, 1365, 1366, 20000} {
		a := ascii(n)
		out = append(out, a, a[:n-1]+"é")
	}
	return out
}

// TestTextBoundaries: texts (see boundaryTexts) reach the host intact as
// key, value and fence of a set, and come back intact from get (value and
// text) and in events (key, value, version).
func TestTextBoundaries(t *testing.T) {
	texts := boundaryTexts()
	t.Run("set and get", func(t *testing.T) {
		h := abitest.New()
		s := start(t, h, abi.Limits{})
		for i, text := range texts {
			key := "k/" + text
			lock := "L" + text // the fence: the third argument in the static area
			if _, err := h.Lock(t.Context(), lock, time.Minute, abi.LockOptions{}); err != nil {
				t.Fatalf("lock %.40q: %v", lock, err)
			}
			got := ruletest.Run(t, s, h, ruletest.Command("set", key, text, "0", "0", lock))
			if !strings.HasPrefix(got, "set status=OK msg= version=") {
				t.Fatalf("text %d (%d bytes %.40q): %.200q", i, len(text), text, got)
			}
			if c, _ := h.LastCall(abi.FnSet); c.Key != key || c.Set.Fence != lock {
				t.Errorf("text %d: set key %.40q fence %.40q, want %.40q and %.40q", i, c.Key, c.Set.Fence, key, lock)
			}
			wantValue(t, h, key, text)
			got = ruletest.Run(t, s, h, ruletest.Command("get", key))
			if want := "get status=OK msg= value=" + show([]byte(text)) + " text=" + text + " version="; !strings.HasPrefix(got, want) {
				t.Errorf("text %d: got %.200q\nwant %.200q...", i, got, want)
			}
		}
	})
	t.Run("events", func(t *testing.T) {
		h := abitest.New()
		s := start(t, h, abi.Limits{})
		if err := s.Handle(t.Context(), ruletest.Command("echo-all")); err != nil {
			t.Fatal(err)
		}
		for i, text := range texts {
			ev := abi.Event{Key: "e/" + text, Op: abi.OpSet, Value: []byte(text), Version: text}
			want := fmt.Sprintf("event op=SET key=%s value=%s text=%s version=%s resync=false deadline=0 late=false",
				ev.Key, show(ev.Value), text, text)
			if got := ruletest.Run(t, s, h, ev); got != want {
				t.Errorf("text %d: got %.200q\nwant %.200q", i, got, want)
			}
		}
	})
}

// FuzzSetText: any valid UTF-8 text set as a value (a string, encoded by
// the SDK) reaches the host byte for byte, and get decodes it back.
func FuzzSetText(f *testing.F) {
	for _, text := range boundaryTexts() {
		if len(text) <= 100 {
			f.Add(text)
		}
	}
	h := abitest.New()
	s := start(f, h, abi.Limits{})
	f.Fuzz(func(t *testing.T, text string) {
		text = strings.ToValidUTF8(text, "\uFFFD")
		got := ruletest.Run(t, s, h, ruletest.Command("set", "k", text, "0", "0", ""))
		if !strings.HasPrefix(got, "set status=OK msg= version=") {
			t.Fatalf("set %q: %.200q", text, got)
		}
		wantValue(t, h, "k", text)
		got = ruletest.Run(t, s, h, ruletest.Command("get", "k"))
		if want := "get status=OK msg= value=" + show([]byte(text)) + " text=" + text + " version="; !strings.HasPrefix(got, want) {
			t.Errorf("got %.200q\nwant %.200q...", got, want)
		}
	})
}
