// Package group is a host's part in a group of hosts (host.Config.Group):
// several hosts run the same rule files, and each rule runs on one of them at
// a time. The group's loop, membership and hand-overs are here; the host's
// side (loading and stopping the rules it is given, their writes fenced with
// the ownership leases) is host/grouphost.go, and the group calls it through
// the interfaces of host.go. A group's shared data (the roster, rule sets,
// assignment, progress, withdrawals) and their stored forms are
// host/internal/membership's.
//
// Membership lives in documented keys under the host's reserved prefix
// (host.ReservedPrefix, given to New; the store has no key listing):
//
//	$ssrun/group/NAME/member/ID  a lease (SET NEX PX ttl, renewed every
//	                             ttl/3) held by the member whose client id
//	                             is ID: present while it lives
//	$ssrun/group/NAME/roster     the members, one a line: "ID DIGEST", the
//	                             member's id and the digest of its rule set
//	                             (rules.go), written under the roster
//	                             lock and fenced with it; every member
//	                             watches it
//	$ssrun/group/NAME/rules/D    the rule set whose digest is D: the shared
//	                             rule files a member has and offers (not
//	                             those withdrawn: membership.Withdrawals)
//	$ssrun/group/NAME/roster.lock  the roster's lock (a lease)
//	$ssrun/group/NAME/rule/H     the ownership lease of the rule whose file
//	                             name hashes to H (membership.RuleHash)
//	$ssrun/group/NAME/seen/H     the versions of the watched keys the rule's
//	                             owner handled last, for the next owner
//	$ssrun/group/NAME/patterns/ID, found/ID  pattern hints (hints.go)
//
// The live members are those of the roster whose member key is present.
// Each host assigns the rules to them, each rule among the members that
// have its file (membership.AssignAmong: rendezvous hashing with bounded
// loads), takes the ownership lease of each rule assigned to it (the lease
// code locks use, host/internal/lease: same timing argument, same renewal),
// loads those rules, and hands over the others: stops the rule, records
// what it handled, releases the lease. Every write of an owned rule that
// names no fence of its own carries the ownership lease's token, so a
// former owner that was paused or cut off cannot write once the next owner
// has: the store refuses it, and the host learns that it lost the rule.
//
// A new owner re-reads the rule's watched keys and delivers, as resync
// events, those whose version differs from the one the previous owner
// recorded as handled. The record is written every ttl/3 and at a hand-over,
// so a crash re-delivers at most the events of the last ttl/3
// (at-least-once); values superseded while no host owned the rule are not
// delivered (the latest value of each key is: state, not a log). Timers are
// kept in the store per rule file (host/internal/timers): a rule loads them
// where it starts, so they move with it. Locks are not moved: the next owner's
// rule takes them again once the former holder's lease lapses.
//
// A rule whose load fails on its owner moves to another live member that
// offers it, in any version (members may differ: membership's groupsets.go;
// a load may fail on one host only): the owner withdraws its own version
// from the rule set its roster line names and hands the rule over. The
// version is offered again when its file changes or no other member offers
// the rule any more; a rule no other member offers stays owned where it
// failed, its failure in Status (membership's groupfailed.go has the rules,
// and why they cannot loop).
package group
