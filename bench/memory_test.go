package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/host"
)

// vmRSS returns the resident set size of process pid (0 = this process) in
// bytes, from /proc/<pid>/status.
func vmRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("%s: VmRSS %q: %v", path, rest, err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("%s has no VmRSS", path)
	return 0
}

// memoryUse is what loading rules added to this process.
type memoryUse struct {
	heap, rss float64 // bytes per rule: live Go heap, resident set
}

// loadMany loads n rules made by file(i) into e and returns the memory they
// added, per rule. Both sides are measured after debug.FreeOSMemory (a GC
// that also returns freed memory to the OS, so that the garbage of reading
// and copying rule files does not count as resident).
func (e *env) loadMany(n int, file func(i int) (string, []byte, bool)) memoryUse {
	e.tb.Helper()
	var before, after runtime.MemStats
	debug.FreeOSMemory()
	runtime.ReadMemStats(&before)
	rss := vmRSS(e.tb, 0)
	for i := range n {
		e.load(file(i))
	}
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	return memoryUse{
		heap: (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n),
		rss:  float64(vmRSS(e.tb, 0)-rss) / float64(n),
	}
}

// BenchmarkMemoryPerRule is the memory of one more loaded rule, through the
// host: for each runtime, one rule is loaded first (so compiled code and
// caches shared by all copies of a file's content are in place), then n
// copies under other file names, and the growth of the live Go heap
// (runtime.MemStats.HeapAlloc after GC) and of the process's resident set
// (VmRSS; noisier) is divided by n. The BASELINE, measured the same way in
// the same host just before, is the native Go rule: the host's own cost of
// a rule (mailbox, watches, bindings). Plugin rules also report the mean
// resident set of their processes (VmRSS from /proc/<pid>/status). All rules
// of a kind watch the same keys. Reports heap-B/rule, rss-B/rule,
// native-heap-B/rule, x-native (heap), and for plugins child-rss-B and
// total-B/rule (host heap + child RSS). Run with -benchtime=1x.
func BenchmarkMemoryPerRule(b *testing.B) {
	prebuild(b, "A")
	luaSrc, wasmSrc, pluginSrc := luaRule(b, "A"), wasmGuest(b, "A"), readFile(b, pluginRule(b))
	native := func(i int) (string, []byte, bool) { return fmt.Sprintf("mem-%03d.native", i), []byte("A"), false }
	for _, tc := range []struct {
		name string
		n    int
		file func(i int) (string, []byte, bool)
	}{
		{"lua", 100, func(i int) (string, []byte, bool) { return fmt.Sprintf("mem-%03d.lua", i), luaSrc, false }},
		{"wasm-go", 16, func(i int) (string, []byte, bool) { return fmt.Sprintf("mem-%03d.wasm", i), wasmSrc, false }},
		{"wasm-small", 100, func(i int) (string, []byte, bool) {
			return fmt.Sprintf("mem-%03d.wasm", i), smallRule("small/in"), false
		}},
		{"plugin", 4, func(i int) (string, []byte, bool) { return fmt.Sprintf("mem-%03d", i), pluginSrc, true }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				e := newEnv(b, host.RuleConfig{})
				e.load(native(999))
				base := e.loadMany(100, native)
				e.load(tc.file(999))
				use := e.loadMany(tc.n, tc.file)
				if got, want := len(e.host.Status()), 100+tc.n+2; got != want {
					b.Fatalf("%d rules loaded, want %d", got, want)
				}
				b.ReportMetric(use.heap, "heap-B/rule")
				b.ReportMetric(use.rss, "rss-B/rule")
				b.ReportMetric(base.heap, "native-heap-B/rule")
				b.ReportMetric(use.heap/base.heap, "x-native")
				if tc.name == "plugin" {
					var child int64
					stats := e.plugin.Stats()
					for _, s := range stats {
						child += vmRSS(b, s.Pid)
					}
					mean := float64(child) / float64(len(stats))
					b.ReportMetric(mean, "child-rss-B")
					b.ReportMetric(use.heap+mean, "total-B/rule")
				}
			}
		})
	}
}
