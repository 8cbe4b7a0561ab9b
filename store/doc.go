// Package store is the Azure IoT Operations state store's semantics, in
// one place, without MQTT: keys with HLC versions, SET NX/NEX/PX, DEL,
// VDEL, fencing tokens, expiry, quotas, KEYNOTIFY registrations and the
// notifications they produce, and, with a data directory, a write-ahead
// journal and snapshots that survive restarts and kill -9.
// statestore-protocol.md (in the repository's docs/) is the reference it
// implements; its §18 says what the store adds.
//
// Execute takes one request as the protocol sends it (a RESP3 payload with
// its __ts and __ft) and returns the reply payload byte for byte, with the
// version to send as __ts; notifications go to each registration's
// Observer. The embedded broker (package broker) serves a Store over MQTT;
// ssrun test, replay and dry runs use one in process, on a virtual clock
// (Config's Now).
//
// # Files
//
//	commands.go        Execute: the validation pipeline of §9 and the commands
//	store.go           the keys: versions, expiry, fencing, quotas
//	registrations.go   KEYNOTIFY registrations and what they may hold
//	seed.go            Seed and Forget: a store in memory holding copies of
//	                   another store's keys (a dry run's staged writes)
//	persist.go         the data directory: design and guarantees
//	persist_recover.go recovery: snapshot, then journal segments
//	persist_snapshot.go snapshots that replace the journal as it grows
//	journal.go         the journal: append, group commit, fsync policies
//	journal_record.go  the byte format of records, segments and snapshots
//	frames.go          reading a data file's frames as they are
//	lock_*.go          one process per data directory
package store
