// Package admin is ssrun's admin HTTP endpoint (`--admin HOST:PORT` on dev,
// run and broker; off by default; ":PORT" or "PORT" listens on loopback):
//
//	GET /healthz   200 "ok" while the process serves (liveness)
//	GET /readyz    200 when ready, else 503 with a line per check
//	               ("[-]store failed: not connected to the state store"):
//	               connected to the store, and every rule file loaded (or,
//	               with --ready-allow-failed-rules, whatever loaded); a
//	               broker-only process once it listens
//	GET /metrics   Prometheus text format (OpenMetrics when asked)
//
// The web console (Console.Register; dev and run) adds, behind the token:
//
//	GET /               the console's page (admin/console: HTML, CSS and
//	                    JavaScript embedded in the binary)
//	GET /console/api/*  the JSON it draws (rules, rule, events, stream (SSE),
//	                    keys, key, timers, group)
//	GET /whynot         why a rule did not react to a key's last change
//
// and, open, POST /console/login, where a browser gives the token once for
// a cookie checked like the header (consoleauth.go). Its memory is a
// host.Tracer of bounded rings (console.go); its streams never block a rule
// (stream.go).
//
// Other endpoints are added with Server.Handle (/status, /why: they show
// values, client ids and errors) or Server.HandleOpen (/metrics). With a
// token (Config.Token), what Handle added answers only requests that carry
// it (`Authorization: Bearer TOKEN`, compared in constant time), others
// get 401; the probes and what HandleOpen added stay open. Without a
// token, Start refuses an address other hosts may reach (Loopback) when
// Handle added anything (ErrTokenRequired). Pages of other sites are kept
// out (Server.guard, ownSite): on loopback only a Host of localhost or an
// IP address is answered (DNS rebinding), a cross-origin POST is refused,
// and what Handle added refuses what another site's page fetches
// (Sec-Fetch-Site), all with 403. Bodies of the probes are plain text, as
// Kubernetes' own.
//
// # Metrics
//
// A private registry (nothing in Prometheus' global one) holds the Go
// runtime (go_*) and process (process_*) collectors and the series below.
// Counters and gauges are read from the host, the store client and the
// broker at each scrape (host.Status and Stats, protocol.Client.Stats,
// broker.Stats), so they cost nothing between scrapes; the histograms are
// fed per call through host.Config.Observer and protocol.Config.Observer.
// What a process has decides what it shows: dev all, run the rule and store
// series, broker the broker series.
//
// Per rule, labelled rule (the file name) and kind (lua, wasm, plugin):
//
//	ssrun_rule_events_handled_total     counter   events handled successfully
//	ssrun_rule_events_failed_total      counter   handler calls that failed (error, timeout, memory, crash)
//	ssrun_rule_events_dropped_total     counter   events dropped: mailbox full, or rule disabled
//	ssrun_rule_echoes_suppressed_total  counter   events skipped as echoes of the rule's own writes
//	ssrun_rule_calls_abandoned_total    counter   handler calls given up on as stuck (also failed)
//	ssrun_rule_events_coalesced_total   counter   changes replaced in the mailbox by a newer change of their key
//	ssrun_rule_calls_restarted_total    counter   handler calls cut by a newer change of their key (mode restart)
//	ssrun_rule_mailbox_depth            gauge     events waiting in the mailbox
//	ssrun_rule_calls_in_flight          gauge     events being handled now (up to the rule's concurrency)
//	ssrun_rule_disabled                 gauge     1 while disabled after repeated failures
//	ssrun_rule_timers_pending           gauge     timers armed
//	ssrun_rule_pattern_watched_keys     gauge     keys its pattern watches cover
//	ssrun_rule_handler_seconds          histogram handler call duration (label rule only)
//
// Per host:
//
//	ssrun_host_rules_loaded             gauge     rules running
//	ssrun_host_rules_load_failed        gauge     rule files that failed to load, no version running
//	ssrun_host_notifications_total      counter   key notifications routed to rules
//	ssrun_host_loops_damped_total       counter   events dropped by the feedback-loop damper
//	ssrun_host_resyncs_total            counter   resync events after reconnections
//	ssrun_host_watched_keys             gauge     keys registered for notifications
//	ssrun_host_stuck_calls              gauge     runtime calls abandoned and still running
//	ssrun_host_patterns_watched         gauge     patterns the rules watch, each once
//	ssrun_host_pattern_scans_total      counter   scans of the store (keys, watch_pattern, rescans)
//	ssrun_host_pattern_scan_pages_total counter   SCAN pages read
//	ssrun_host_pattern_keys_found_late_total  counter  keys found after a pattern's first scan
//	ssrun_host_pattern_keys_over_limit_total  counter  keys not watched: max_watched_keys reached
//	ssrun_host_pattern_scan_errors_total      counter  pattern scans that failed
//
// Per store client:
//
//	ssrun_store_requests_total          counter   requests by command (get, set, del, vdel,
//	                                              keynotify, keynotify stop) and outcome (ok,
//	                                              service_error, timeout, not_connected,
//	                                              connection_lost, canceled, too_large, error)
//	ssrun_store_request_seconds         histogram request duration by command
//	ssrun_store_connected               gauge     1 while connected
//	ssrun_store_reconnects_total        counter   connections after the first
//	ssrun_store_notifications_total     counter   key notifications received
//	ssrun_store_events_dropped_total    counter   notifications dropped: the event queue was full
//	ssrun_store_requests_pending        gauge     requests waiting for their response
//
// Per embedded broker:
//
//	ssrun_broker_connections                  gauge   MQTT clients connected
//	ssrun_broker_keys                         gauge   keys stored
//	ssrun_broker_bytes                        gauge   stored size as --max-bytes counts it
//	ssrun_broker_keynotify_registrations      gauge   KEYNOTIFY registrations
//	ssrun_broker_notifications_queued_total   counter notifications queued for clients
//	ssrun_broker_notifications_dropped_total  counter messages that could not be delivered
//	ssrun_broker_client_queue_overflows_total counter clients cut off for a full output queue
//
// A removed rule's counters and gauges leave with it; its handler
// histogram stays until the process ends.
package admin
