// Package bench is ssrun's benchmark suite: the measurements that span
// several packages (the ABI verbs and the event round trip of the Lua,
// WebAssembly and plugin runtimes side by side, end-to-end rule throughput
// through the host against a native client baseline, change-to-write
// latency, hot-reload latency, memory per loaded rule, and a host with 1,000
// rules against the same host with 1). Everything is in its _test.go files
// and testdata: plain `go test ./bench/` runs only quick checks that the
// fixtures work; the measurements run with -bench, and scripts/bench runs
// them all with the per-package benchmarks and records the results (see
// BENCHMARKS.md).
package bench
