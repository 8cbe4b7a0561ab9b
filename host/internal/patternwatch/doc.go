// Package patternwatch is the host's side of pattern watches
// (watch_pattern, and the scans of keys): the Hub scans each pattern once
// for all the rules watching it, rescans it on the host's clock and after
// a reconnection, and finds at once a key a rule of the host (or, in a
// group, of another member) wrote (hub.go); a rule's Rule keeps its
// patterns, registers the keys they cover with the watch registry and
// gives the rule what it did not see of them (rule.go). What does no I/O,
// a pattern compiled and checked and the rescan schedule, is package
// patterns'.
//
// It knows no host: what it needs of the host and of a rule (the store,
// the watch registry, the damper, the rule's mailbox, settings and
// watches, a group's hints) it declares as small interfaces that the
// host's types satisfy.
package patternwatch
