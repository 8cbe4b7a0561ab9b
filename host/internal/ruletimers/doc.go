// Package ruletimers is a rule's durable timers (the timer and cancel
// verbs): arming and cancelling them, their records, index shards and
// directory in the store under the reserved prefix, written fenced in a
// group; loading them when the rule loads and holding them until a version
// of the rule is live; their firings, queued in the rule's mailbox (kept
// waiting while it is full) and recorded once the handler returned;
// undoing what a failed first load armed or cancelled; dropping them with
// a deleted rule; what the admin console shows of them.
//
// The scheduler that fires them, and the keys and encodings of timers in
// the store, are host/internal/timers'. What the timers use of the host
// (its lifetime, logger, clock, the store, the scheduler, its group's
// fence) is Services, which the host builds; a version of the rule is a
// Version.
package ruletimers
