package testrun

import "testing"

// handled and failed are always checked; coalesced and dropped only when
// the case gives them.
func TestCountsMatch(t *testing.T) {
	one, zero := 1, 0
	for _, tc := range []struct {
		want                                Counts
		handled, failed, coalesced, dropped uint64
		ok                                  bool
		says                                string
	}{
		{Counts{Handled: 3}, 3, 0, 7, 9, true, "handled 3 failed 0"},
		{Counts{Handled: 3}, 3, 1, 0, 0, false, "handled 3 failed 0"},
		{Counts{Handled: 3, Coalesced: &one}, 3, 0, 1, 9, true, "handled 3 failed 0 coalesced 1"},
		{Counts{Handled: 3, Coalesced: &one}, 3, 0, 2, 0, false, "handled 3 failed 0 coalesced 1"},
		{Counts{Handled: 3, Dropped: &zero}, 3, 0, 5, 1, false, "handled 3 failed 0 dropped 0"},
	} {
		if got := tc.want.Match(tc.handled, tc.failed, tc.coalesced, tc.dropped); got != tc.ok {
			t.Errorf("%s matches handled %d failed %d coalesced %d dropped %d: %t, want %t", tc.want, tc.handled, tc.failed, tc.coalesced, tc.dropped, got, tc.ok)
		}
		if s := tc.want.String(); s != tc.says {
			t.Errorf("String %q, want %q", s, tc.says)
		}
	}
	if got := (Counts{Dropped: &zero}).Got(2, 1, 4, 5).String(); got != "handled 2 failed 1 dropped 5" {
		t.Errorf("Got: %q", got)
	}
}
