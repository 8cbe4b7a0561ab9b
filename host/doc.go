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
// under a fenced ownership lease (group.go).
//
// # Files
//
// Each file uses only files on the lines below its own (a type, function,
// field or method declared there); none reaches up. TestFileLayers keeps it
// so.
//
//	reload.go check.go liveconfig.go grouphost.go idle.go
//	                       WatchDir, on Load and Remove; Checker (ssrun check);
//	                       SetRuleConfig, rule settings applied to loaded rules;
//	                       the host's side of a group; a serial host's
//	                       WaitIdle and Hold
//	loaddir.go             LoadDir: a folder's rules, several loading at once
//	host.go                Host: loads, event routing, resync, Close
//	loadstatus.go          the files that failed to load, for Status
//	loadretry.go           loading again the files whose start failed
//	groupready.go          which failed loads of a group's shared rules
//	                       make a member not ready
//	contenthash.go         the SHA-256 of rule files, remembered by content
//	patterns_guests_stub.go
//	                       the pattern verbs refused (branch s10-guests only:
//	                       deleted with this line when s10-patterns merges)
//	record.go              a version's abi.Host wrapped to report its calls
//	                       and replies to the Recorder
//	binding.go             the abi.Host one version of a rule calls
//	canary.go              a new version in shadow next to the live one,
//	                       compared write by write, swapped in or refused
//	group.go               a group of hosts sharing the rules: its loop,
//	                       membership, takeover and hand-over
//	grouprules.go          which rules each member has: this host's rule
//	                       set, the others' read once per digest; warnings
//	groupstate.go          the group's state, and what an owned rule handled:
//	                       recorded for, and resynced by, the next owner
//	rule.go                a rule: its state, under a lock only this file takes;
//	                       its worker's loop, its writes (one bracket: fence,
//	                       damper, echo), reloads, stop
//	groupfence.go timerundo.go
//	                       a group's ownership leases, fencing owned rules'
//	                       writes; undoing the timer calls of a failed first
//	                       load
//	worker.go locks.go echo.go logbudget.go ruletimers.go
//	                       a rule's goroutine and call state; its leases; its
//	                       own writes awaiting their echo; its log budget;
//	                       its timers (arm, fire, record, load, drop)
//	grouptimers.go park.go a rule's timer writes, fenced in a group; a
//	                       handler waiting in a lock wait, idle in a serial
//	                       host
//	services.go            what rules use of the host
//	dryrun.go              a dry run's and a canary's staged writes: made
//	                       on a layer, reported
//	layer.go               a copy-on-write layer over the store: the keys
//	                       written copied into a store in process
//	journal.go             the provenance journal: each key's last rule write
//	registry.go lineage.go abandon.go timerstore.go gate.go
//	                       watch multiplexing; the feedback-loop damper and
//	                       the chains of rule writes it follows;
//	                       runtime calls that may not return; the keys and
//	                       encodings of timers in the store; the bound on
//	                       handler calls running at once
//	groupfailed.go         the versions of rules a group member withdrew, as
//	                       they fail to load there
//	mailbox.go config.go errors.go rulefile.go groupassign.go groupseen.go
//	                       ...; which member owns which rule; what an owned
//	                       rule handled
//	observer.go recorder.go
//	                       the metrics observer; the trace recorder
//	timers.go chain.go groupsets.go virtualclock.go
//	                       the timer scheduler: one heap, one goroutine; the
//	                       path of rule writes that led to an event; a
//	                       group's roster lines and rule sets, stored; the
//	                       virtual clock of ssrun test and replay
//	clock.go               the host's Clock; wake-ups that count as activity
//	quiet.go               a serial host: one handler at a time, in order,
//	                       and when it is idle
//	store.go               the Store port: *protocol.Client, over MQTT or to
//	                       a store in process
//
// A rule and its leases share the host's services (client, logger,
// registry, damper, call tracker, lease clock, lifetime: services in
// services.go), not the Host; the registry gets the client and a logger.
package host
