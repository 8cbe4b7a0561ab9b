// Package observe holds the hooks through which the host is observed, and
// the host's side of them: an Observer (each handler call's time, for
// metrics), a Recorder (what the rules see, for a trace that replays them)
// and a Tracer (what becomes of each event; a CallTracer also wants each
// host call of a run). Recorded and Traced wrap a rule's abi.Host to tell
// a Recorder and a CallTracer of its calls; Ran, Skipped, Coalesced,
// Damped and Wrote tell a Tracer, when there is one, what the host saw.
//
// Package host gives the hooks their public names (host.Observer,
// host.Recorder, host.Tracer, ...: aliases of these types) and builds the
// wrappers when it starts a rule's version; nothing here knows a rule or
// the Host. Every hook is called on the host's goroutines, so it must be
// fast and must not block or call the Host; a nil hook costs nothing.
package observe
