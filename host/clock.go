package host

import "time"

var epoch = time.Now()

// now is the time on the monotonic clock, in nanoseconds: what the damper,
// the log budget and the workers time their windows and calls with.
func now() int64 { return int64(time.Since(epoch)) }
