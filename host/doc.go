// Package host runs rules against the state store: it owns the store client's
// event stream, multiplexes watches (one KEYNOTIFY per key), delivers events
// to each rule one at a time from a bounded mailbox, suppresses a rule's own
// echoes and damps feedback loops between rules, resynchronises watched keys
// after a reconnect, holds leases with fencing tokens for rules, and loads,
// hot-reloads and stops rule files. It keeps rules' timers durable in the
// store (under ReservedPrefix) and fires them from one scheduler. A dry run
// (Config.DryRun) stages the rules' writes in a store in process, a layer
// over the real one, and reports them instead of sending them. A canary
// reload (RuleConfig.Canary) runs a new version in shadow, its writes
// staged likewise, and swaps it in only when it wrote what the live
// version wrote. In a group (Config.Group) several
// hosts share the rules, each rule running on one live host at a time
// under a fenced ownership lease (internal/group; the host's side is
// grouphost.go).
//
// # Packages
//
// The host keeps the Host, a rule's life (its worker, leases, timers,
// reloads, canary) and the binding a rule calls; what sits below it lives in
// packages under host/, each with one job, that the compiler and
// internal/archtest keep apart (docs/architecture.md draws them):
//
//	clock                 the host's Clock: real, or virtual (ssrun test, replay)
//	provenance            chains of rule writes; the journal of each key's last write (why)
//	rulefile              which files are rules, on which runtime; reading them
//	staging               a dry run's and a canary's staged writes, on a layer over the store
//	internal/watch        the watch registry: one KEYNOTIFY per key; resync
//	internal/mailbox      a rule's bounded FIFO of events
//	internal/lineage      the feedback-loop damper: each event's place in a chain
//	internal/echo         a rule's own writes awaiting their echo
//	internal/observe      the hooks the host is observed through; their wrappers of a rule's host
//	internal/timers       the timer scheduler; timers' keys and encodings in the store
//	internal/ruletimers   a rule's durable timers: arm, cancel, firing, load, drop; held until a version is live
//	internal/membership   a group's roster, rule sets, assignment, progress, withdrawals
//	internal/group        a host's part in a group: its loop, membership, hand-overs, fencing, pattern hints
//	internal/guard        the link of a rule's abi.Host chain that checks each call
//	internal/status       store errors to abi statuses, in one table
//	internal/abandon      runtime calls that may not return: tracked, given up past their grace
//	internal/logbudget    a rule's log budget per window
//	internal/loadretry    the rule files that failed to load; loading again those whose start failed
//	internal/gate         the bound on handler calls running at once
//	internal/serial       a serial host's activity and turn; waits and wake-ups that count
//	internal/contenthash  the SHA-256 of rule files, remembered by content
//	internal/patterns     a watched pattern compiled and checked against permissions; the rescan schedule
//	internal/patternwatch pattern watches: scans, rescans, keys rules write; each rule's keys and what it saw
//	internal/lease        a rule's locks: leases with fencing tokens, renewal, LOCK_LOST
//
// Pattern watches (watch_pattern) are internal/patternwatch's: its Hub (one
// scan per pattern for all its rules, rescans, keys rules write) and a
// rule's Rule (its pattern keys and what it saw of them); the verbs are in
// patterns.go. A rule's locks are internal/lease's Leases (rule.locks), its
// timers internal/ruletimers' Timers (rule.timers).
//
// A rule's abi.Host is a chain of links (binding.chain): the guard's
// checks, a pool replica's refusals, a dry run's or a canary's staging,
// then the binding, the store link; the recorder and the call tracer wrap
// it (docs/architecture.md).
//
// A rule keeps its state under one lock, rule.mu, that only rule.go takes
// (internal/archtest checks it).
//
// A rule and its leases share the host's services (client, logger,
// registry, damper, call tracker, lease clock, lifetime: services in
// services.go), not the Host; the registry gets the client and a logger.
package host
