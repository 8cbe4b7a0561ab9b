package hlc

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want HLC
	}{
		{"001696374425000:00001:StateStore", HLC{1696374425000, 1, "StateStore"}},
		{"1696374425000:1:StateStore", HLC{1696374425000, 1, "StateStore"}},
		{"001732000000000:00000:0193-client", HLC{1732000000000, 0, "0193-client"}},
		{"0:0:x", HLC{0, 0, "x"}},
		{"9223372036854775807:2147483647:n", HLC{math.MaxInt64, MaxCounter, "n"}},
		{"1:2:node with spaces/and-unicode-é", HLC{1, 2, "node with spaces/and-unicode-é"}},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{
		"", "abc", "1:2", "1:2:", ":2:n", "1::n", "1:2:n:x", "-1:2:n", "1:-2:n", "+1:2:n",
		"1 :2:n", "0x1:2:n", "9223372036854775808:0:n", "1:18446744073709551616:n", "١:2:n",
		"1:2147483648:n", "1:18446744073709551615:n", // counters beyond MaxCounter
	} {
		if h, err := Parse(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrMalformed", in, h, err)
		}
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		h    HLC
		want string
	}{
		{HLC{1696374425000, 1, "StateStore"}, "001696374425000:00001:StateStore"},
		{HLC{0, 0, "n"}, "000000000000000:00000:n"},
		{HLC{1, 123456, "n"}, "000000000000001:123456:n"},
		{HLC{math.MaxInt64, MaxCounter, "n"}, "9223372036854775807:2147483647:n"},
	} {
		if got := tc.h.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.h, got, tc.want)
		}
		if back, err := Parse(tc.want); err != nil || back != tc.h {
			t.Errorf("Parse(%q) = %+v, %v", tc.want, back, err)
		}
	}
}

func TestCompare(t *testing.T) {
	ordered := []HLC{
		{0, 0, "a"}, {1, 0, "a"}, {1, 0, "b"}, {1, 1, "A"}, {1, 1, "a"}, {2, 0, "a"},
	}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ordered[i].Compare(ordered[j]); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

func TestCheckSkew(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	at := func(d time.Duration) HLC { return HLC{Wall: now.Add(d).UnixMilli(), Node: "n"} }
	if err := CheckSkew(at(time.Minute), now); err != nil {
		t.Errorf("exactly one minute ahead must pass: %v", err)
	}
	if err := CheckSkew(at(time.Minute+time.Millisecond), now); !errors.Is(err, ErrSkew) {
		t.Errorf("one minute and 1 ms ahead: err = %v, want ErrSkew", err)
	}
	if err := CheckSkew(at(-24*time.Hour), now); err != nil {
		t.Errorf("past values pass: %v", err)
	}
}

type fakeTime struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeTime) now() time.Time  { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeTime) set(t time.Time) { f.mu.Lock(); f.t = t; f.mu.Unlock() }

func TestTick(t *testing.T) {
	ft := &fakeTime{t: time.UnixMilli(1000)}
	c := NewClock("StateStore", ft.now)
	a := c.Tick()
	b := c.Tick()
	if a != (HLC{1000, 0, "StateStore"}) || b != (HLC{1000, 1, "StateStore"}) {
		t.Fatalf("ticks at a fixed wall clock: %v then %v", a, b)
	}
	ft.set(time.UnixMilli(999)) // the wall clock steps back: the HLC does not
	d := c.Tick()
	if d != (HLC{1000, 2, "StateStore"}) {
		t.Fatalf("tick after wall clock stepped back: %v", d)
	}
	ft.set(time.UnixMilli(1001))
	e := c.Tick()
	if e != (HLC{1001, 0, "StateStore"}) {
		t.Fatalf("tick after wall clock advanced: %v", e)
	}
}

// The four branches of recv() in §10.4, including S's worked example.
func TestRecv(t *testing.T) {
	const node = "StateStore"
	tests := []struct {
		name       string
		now        int64
		last       HLC
		r          HLC
		want       HLC
		wantErr    error
		unchanged  bool
		clockAfter HLC
	}{
		{name: "wall clock ahead of both", now: 5000, last: HLC{4000, 7, node}, r: HLC{4500, 9, "c"}, want: HLC{5000, 0, node}},
		{name: "S example: equal walls", now: 1696374425000, last: HLC{1696374425000, 0, node}, r: HLC{1696374425000, 0, "CLIENT"}, want: HLC{1696374425000, 1, node}},
		{name: "equal walls takes max counter", now: 100, last: HLC{200, 3, node}, r: HLC{200, 8, "c"}, want: HLC{200, 9, node}},
		{name: "local ahead of request", now: 100, last: HLC{300, 3, node}, r: HLC{200, 8, "c"}, want: HLC{300, 4, node}},
		{name: "request ahead of local", now: 100, last: HLC{200, 3, node}, r: HLC{300, 8, "c"}, want: HLC{300, 9, node}},
		{name: "request too far ahead", now: 100, last: HLC{200, 3, node}, r: HLC{100 + 60001, 0, "c"}, wantErr: ErrSkew},
		{name: "counter at the maximum carries", now: 100, last: HLC{200, 3, node}, r: HLC{200, MaxCounter, "c"}, want: HLC{201, 0, node}},
		{name: "local counter at the maximum carries", now: 100, last: HLC{300, MaxCounter, node}, r: HLC{200, 8, "c"}, want: HLC{301, 0, node}},
		{name: "counter beyond the wire format", now: 100, last: HLC{200, 3, node}, r: HLC{200, math.MaxUint64, "c"}, wantErr: ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock(node, func() time.Time { return time.UnixMilli(tc.now) })
			c.cur = tc.last
			got, err := c.Recv(tc.r)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if c.Now() != tc.last {
					t.Fatalf("failed Recv moved the clock to %v", c.Now())
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Recv = %v, %v; want %v", got, err, tc.want)
			}
			if got.Compare(tc.r) <= 0 || got.Compare(tc.last) <= 0 {
				t.Fatalf("Recv result %v not above request %v and last %v", got, tc.r, tc.last)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	now := time.UnixMilli(10_000)
	c := NewClock("me", func() time.Time { return now })
	if err := c.Observe(HLC{20_000, 5, "server"}); err != nil {
		t.Fatal(err)
	}
	next := c.Tick()
	if next.Compare(HLC{20_000, 5, "server"}) <= 0 || next.Node != "me" {
		t.Fatalf("tick after observe = %v, want above the observed value", next)
	}
	if err := c.Observe(HLC{10_000 + 60_001, 0, "server"}); !errors.Is(err, ErrSkew) {
		t.Fatalf("observe too far ahead: %v", err)
	}
	before := c.Now()
	_ = c.Observe(HLC{90_000, 0, "me"}) // own node: ignored
	if c.Now() != before {
		t.Fatalf("observing own node moved the clock")
	}
}

// A value at the largest counter, observed or received, never leaves the
// clock unable to advance: the next values carry into the wall time.
func TestPoisonedCounterCarries(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	poison := HLC{Wall: now.UnixMilli() + 59_000, Counter: MaxCounter, Node: "attacker"}
	for _, merge := range []struct {
		name string
		do   func(c *Clock) error
	}{
		{"observe", func(c *Clock) error { return c.Observe(poison) }},
		{"recv", func(c *Clock) error { _, err := c.Recv(poison); return err }},
	} {
		t.Run(merge.name, func(t *testing.T) {
			c := NewClock("StateStore", func() time.Time { return now })
			if err := merge.do(c); err != nil {
				t.Fatal(err)
			}
			last := c.Now()
			for i := range 3 {
				v := c.Tick()
				if v.Compare(last) <= 0 || v.Compare(poison) <= 0 {
					t.Fatalf("tick %d: %v not above %v and the poison", i, v, last)
				}
				last = v
			}
			v, err := c.Recv(HLC{Wall: now.UnixMilli(), Node: "client"})
			if err != nil || v.Compare(last) <= 0 {
				t.Fatalf("recv after the poison: %v, %v", v, err)
			}
			if ahead := v.Wall - poison.Wall; ahead > 1 {
				t.Fatalf("carry moved the clock %d ms past the poison, want at most 1", ahead)
			}
		})
	}
	c := NewClock("StateStore", func() time.Time { return now })
	if err := c.Observe(HLC{Wall: 1, Counter: math.MaxUint64, Node: "x"}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("observing a counter beyond the wire format: %v, want ErrMalformed", err)
	}
	if c.Now() != (HLC{Node: "StateStore"}) {
		t.Fatalf("a refused value moved the clock to %v", c.Now())
	}
}

// Versions issued concurrently are unique and strictly increasing in issue order.
func TestClockConcurrent(t *testing.T) {
	c := NewClock("n", nil)
	var mu sync.Mutex
	seen := map[HLC]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last HLC
			for i := 0; i < 1000; i++ {
				var h HLC
				if i%2 == 0 {
					h = c.Tick()
				} else {
					h, _ = c.Recv(HLC{Wall: time.Now().UnixMilli(), Counter: uint64(i), Node: "c"})
				}
				if h.Compare(last) <= 0 {
					t.Errorf("not increasing: %v after %v", h, last)
					return
				}
				last = h
				mu.Lock()
				if seen[h] {
					t.Errorf("duplicate version %v", h)
				}
				seen[h] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"001696374425000:00001:StateStore", "1696374425000:1:StateStore", "0:0:x", "abc", "1:2:",
		"9223372036854775807:18446744073709551615:n", "9223372036854775808:0:n", "::", "1:2:3:4",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if h.Wall < 0 || h.Node == "" || strings.Contains(h.Node, ":") {
			t.Fatalf("Parse(%q) accepted an invalid value %+v", s, h)
		}
		back, err := Parse(h.String())
		if err != nil || back != h {
			t.Fatalf("round trip of %q: %q -> %+v, %v", s, h.String(), back, err)
		}
		if h.Compare(back) != 0 {
			t.Fatalf("value not equal to itself")
		}
	})
}
