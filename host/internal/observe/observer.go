package observe

import "time"

// Observer is told about every handler call that returns to its rule, for
// metrics (package admin turns it into a latency histogram). It is called
// on the rule's worker goroutine between two events, so it must be fast and
// must not block or call the Host. A nil Config.Observer costs nothing.
type Observer interface {
	// ObserveHandle reports one call of rule's handler (rule is the file
	// name: the base of RuleStatus.Path, as in the logs): how long it took and
	// whether it returned an error. Calls abandoned as stuck are not
	// reported (they are counted in RuleStatus.Abandoned).
	ObserveHandle(rule string, took time.Duration, failed bool)
}
