package plugin

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// FuzzRawStderr feeds arbitrary output of a plugin's original stderr to the
// rule's log (rawStderr): it never panics, what reaches the log does not
// depend on how the output was cut into writes, a line is at most maxLine
// bytes unless it is an hclog line (parsed by hclogLine), and hclogLine
// takes exactly the JSON objects with a string @message.
func FuzzRawStderr(f *testing.F) {
	long := strings.Repeat("x", maxLine)
	for _, seed := range []struct {
		out   string
		chunk uint
	}{
		// TestRawStderrLevels's lines.
		{"plain\n{\"@level\":\"debug\",\"@message\":\"plugin address\",\"@timestamp\":\"x\",\"network\":\"unix\",\"n\":1}\n{\"@level\":\"bogus\",\"@message\":\"odd level\"}\n{\"no\":\"message\"}\n{not json\npanic: boom\ngoroutine 1 [running]:\n", 7},
		// go-plugin's own lines, as a plugin writes them.
		{`{"@level":"info","@message":"plugin started","@module":"ssrun","@timestamp":"2026-01-01T00:00:00.000000Z","path":"/bin/p","pid":12}` + "\n", 1},
		{`{"@level":"error","@message":"a\nb","err":{"x":[1,null,true]},"":""}` + "\r\n", 3},
		{`{"@message":1}` + "\n" + `{"@message":"x"} trailing` + "\n" + `[{"@message":"x"}]` + "\n" + `{"@message":"x","@message":"y"}` + "\n", 2},
		{"fatal error: all goroutines are asleep\n\x00\xff\r\r\n\n", 5},
		// A line of exactly maxLine bytes, its end in a later write.
		{long + "\n", maxLine},
		{long + "\r\n", maxLine},
		{long + "\r\n", maxLine + 1},
		{long + "y\n", maxLine},
		{long + long + "\r", maxLine},
	} {
		f.Add([]byte(seed.out), seed.chunk)
	}
	f.Fuzz(func(t *testing.T, out []byte, chunk uint) {
		size := max(1, int(chunk%uint(len(out)+1)))
		// write passes out to w at once, or size bytes at a time.
		write := func(w *lineWriter, size int) {
			for rest := out; len(rest) > 0; {
				n := min(size, len(rest))
				if m, err := w.Write(rest[:n]); m != n || err != nil {
					t.Fatalf("Write = %d, %v", m, err)
				}
				rest = rest[n:]
			}
			w.Flush()
		}
		var whole, cut []string
		write(newLineWriter(func(l string) { whole = append(whole, l) }), len(out))
		write(newLineWriter(func(l string) { cut = append(cut, l) }), size)
		if !slices.Equal(cut, whole) {
			t.Fatalf("%s written %d bytes at a time: lines\n%s\nnot, as written at once,\n%s", brief([]string{string(out)}), size, brief(cut), brief(whole))
		}
		for _, l := range whole {
			if len(l) > maxLine || strings.Contains(l, "\n") {
				t.Fatalf("%s: line %s", brief([]string{string(out)}), brief([]string{l}))
			}
		}
		wholeLog, cutLog := abitest.New(), abitest.New()
		write(rawStderr(wholeLog), len(out))
		write(rawStderr(cutLog), size)
		if got, want := cutLog.Logs(), wholeLog.Logs(); !slices.Equal(got, want) {
			t.Fatalf("%s written %d bytes at a time: logged\n%.300v\nnot, as written at once,\n%.300v", brief([]string{string(out)}), size, got, want)
		}
		for _, l := range wholeLog.Logs() {
			if l.Level != abi.LevelDebug && l.Level != abi.LevelInfo && l.Level != abi.LevelWarn && l.Level != abi.LevelError {
				t.Fatalf("%q: level %d", l.Msg, l.Level)
			}
		}
		// hclogLine on each line as the writer cuts them.
		for line := range strings.SplitSeq(string(out), "\n") {
			line = strings.TrimSuffix(line, "\r")
			level, msg, ok := hclogLine(line)
			var fields map[string]any
			isObj := json.Unmarshal([]byte(line), &fields) == nil && fields != nil && strings.HasPrefix(line, "{")
			m, isMsg := fields["@message"].(string)
			if ok != (isObj && isMsg) {
				t.Fatalf("hclogLine(%q) ok = %v", line, ok)
			}
			if !ok {
				continue
			}
			if !strings.HasPrefix(msg, m) {
				t.Fatalf("hclogLine(%q) = %q, not led by its @message", line, msg)
			}
			name, _ := fields["@level"].(string)
			want, known := hclogLevels[name]
			if !known {
				want = abi.LevelInfo
			}
			if level != want {
				t.Fatalf("hclogLine(%q): level %d, want %d", line, level, want)
			}
		}
	})
}
