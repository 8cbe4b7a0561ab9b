package testrun

import "fmt"

// Match reports whether a rule's counts are those c expects: handled and
// failed always, coalesced and dropped when c gives them.
func (c Counts) Match(handled, failed, coalesced, dropped uint64) bool {
	given := func(want *int, got uint64) bool { return want == nil || uint64(*want) == got }
	return uint64(c.Handled) == handled && uint64(c.Failed) == failed && given(c.Coalesced, coalesced) && given(c.Dropped, dropped)
}

// String is c as a failure message says it, with only the counts given.
func (c Counts) String() string {
	s := fmt.Sprintf("handled %d failed %d", c.Handled, c.Failed)
	if c.Coalesced != nil {
		s += fmt.Sprintf(" coalesced %d", *c.Coalesced)
	}
	if c.Dropped != nil {
		s += fmt.Sprintf(" dropped %d", *c.Dropped)
	}
	return s
}

// Got returns the counts of a rule's status in c's form: the optional
// counts given where c gives them.
func (c Counts) Got(handled, failed, coalesced, dropped uint64) Counts {
	got := Counts{Handled: int(handled), Failed: int(failed)}
	if c.Coalesced != nil {
		n := int(coalesced)
		got.Coalesced = &n
	}
	if c.Dropped != nil {
		n := int(dropped)
		got.Dropped = &n
	}
	return got
}
