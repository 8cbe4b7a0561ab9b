package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host"
)

// The live stream of the console (GET /console/api/stream, Server-Sent
// Events): the recent entries that match its filter, then each new one,
// written in batches every 100 ms (one write and wake-up per batch, not per
// entry), each entry encoded once for every stream. Rules never wait for a
// stream: an entry is handed to each stream's bounded buffer without
// blocking, and one that finds the buffer full, or the stream over its
// rate, is skipped and counted; the stream says how many it skipped
// ("skipped" events). A client that stops reading is cut
// off once a write has waited ConsoleConfig.WriteTimeout; until then it holds at
// most its buffer.

// Stream bounds (ConsoleConfig's zero values).
const (
	DefaultClientBuffer = 256 // entries waiting per stream
	DefaultClientRate   = 200 // entries sent per stream and second; more are skipped (sampled)
	DefaultMaxClients   = 32  // streams at once; more are refused (503)
	// MaxFilter bounds the key glob and the rule name of a filter.
	MaxFilter                 = 256
	DefaultStreamWriteTimeout = 10 * time.Second
	streamTick                = time.Second            // how often skipped counts are reported
	streamHeartbeat           = 15 * time.Second       // a comment line, so proxies keep the stream
	streamFlush               = 100 * time.Millisecond // how often a stream writes what came
)

// errTooManyStreams refuses a stream beyond MaxClients.
var errTooManyStreams = errors.New("too many live streams open")

// streamFilter selects entries by key glob (permission syntax: `*` within
// a segment, `**` across) and rule file name; empty selects all.
type streamFilter struct{ key, rule string }

// parseFilter reads the filter of a stream request: key and rule.
func parseFilter(r *http.Request) (streamFilter, error) {
	q := r.URL.Query()
	f := streamFilter{key: q.Get("key"), rule: q.Get("rule")}
	if len(f.key) > MaxFilter || len(f.rule) > MaxFilter {
		return f, fmt.Errorf("a filter is at most %d bytes", MaxFilter)
	}
	if strings.Count(f.key, "*") > 8 {
		return f, errors.New("a key filter has at most 8 wildcards")
	}
	return f, nil
}

func (f streamFilter) match(e Entry) bool {
	if f.rule != "" && e.Rule != f.rule {
		return false
	}
	return f.key == "" || host.Allowed([]string{f.key}, e.Key)
}

// stream is one live stream's place in the Console.
type stream struct {
	f       streamFilter
	ch      chan *sharedEntry
	skipped uint64 // under Console.mu
	window  int64  // the second its sent count is of
	sent    int
}

// sharedEntry is an entry handed to streams, encoded once for all of them
// by the first that writes it.
type sharedEntry struct {
	e    Entry
	once sync.Once
	json []byte
	err  error
}

func (sh *sharedEntry) encoded() ([]byte, error) {
	sh.once.Do(func() { sh.json, sh.err = json.Marshal(sh.e) })
	return sh.json, sh.err
}

// publishLocked hands e to the streams whose filter it matches.
func (c *Console) publishLocked(e Entry) {
	if len(c.subs) == 0 {
		return
	}
	now := time.Now().Unix()
	var sh *sharedEntry
	for s := range c.subs {
		if !s.f.match(e) {
			continue
		}
		if s.window != now {
			s.window, s.sent = now, 0
		}
		if s.sent >= c.cfg.ClientRate {
			s.skipped++
			continue
		}
		if sh == nil {
			sh = &sharedEntry{e: e}
		}
		select {
		case s.ch <- sh:
			s.sent++
		default:
			s.skipped++
		}
	}
}

// subscribe opens a stream with filter f and returns it with the recent
// entries it matches.
func (c *Console) subscribe(f streamFilter) (*stream, []Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.subs) >= c.cfg.MaxClients {
		return nil, nil, errTooManyStreams
	}
	s := &stream{f: f, ch: make(chan *sharedEntry, c.cfg.ClientBuffer)}
	c.subs[s] = struct{}{}
	var backlog []Entry
	for _, e := range c.recent.all() {
		if f.match(e) {
			backlog = append(backlog, e)
		}
	}
	return s, backlog, nil
}

func (c *Console) unsubscribe(s *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s)
}

// takeSkipped returns and clears the count of entries s skipped.
func (c *Console) takeSkipped(s *stream) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := s.skipped
	s.skipped = 0
	return n
}

// Streams returns the number of live streams open and the entries
// waiting in their buffers.
func (c *Console) Streams() (streams, waiting int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		waiting += len(s.ch)
	}
	return len(c.subs), waiting
}

// streamHandler serves the live stream until the client leaves, a write
// times out, or done is closed (the server shuts down).
func (c *Console) streamHandler(done <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := parseFilter(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: err.Error()})
			return
		}
		s, backlog, err := c.subscribe(f)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, ErrorDoc{Error: err.Error()})
			return
		}
		defer c.unsubscribe(s)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		sse := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: c.cfg.WriteTimeout}
		for _, e := range backlog {
			sse.entry(&sharedEntry{e: e})
		}
		// The stream wakes up on a tick, not per entry: a batch of what
		// came meanwhile is one write (a live page is read by people).
		tick := time.NewTicker(streamFlush)
		defer tick.Stop()
		var sinceReport, quietFor time.Duration
		for sse.flush() == nil {
			select {
			case <-r.Context().Done():
				return
			case <-done:
				return
			case <-tick.C:
			}
			sent := false
			for range cap(s.ch) {
				select {
				case e := <-s.ch:
					sse.entry(e)
					sent = true
					continue
				default:
				}
				break
			}
			if sinceReport += streamFlush; sinceReport >= streamTick {
				sinceReport = 0
				if n := c.takeSkipped(s); n > 0 {
					sse.event("skipped", map[string]uint64{"skipped": n})
					sent = true
				}
			}
			if quietFor += streamFlush; sent {
				quietFor = 0
			} else if quietFor >= streamHeartbeat {
				sse.comment()
				quietFor = 0
			}
		}
	})
}

// sseWriter writes Server-Sent Events: it gathers a batch of them, then
// writes and flushes it at once, bounded by timeout; the first error
// sticks.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
	err     error
}

func (s *sseWriter) entry(sh *sharedEntry) {
	b, err := sh.encoded()
	s.data("entry", b, err)
}

// event adds one event of v.
func (s *sseWriter) event(name string, v any) {
	b, err := json.Marshal(v)
	s.data(name, b, err)
}

// data adds one event of JSON b (no raw newline: data is one line).
func (s *sseWriter) data(name string, b []byte, err error) {
	if err != nil {
		s.err = err
		return
	}
	s.buf = append(append(append(append(s.buf, "event: "...), name...), "\ndata: "...), b...)
	s.buf = append(s.buf, "\n\n"...)
}

func (s *sseWriter) comment() { s.buf = append(s.buf, ": still here\n\n"...) }

// flush writes the batch and flushes it to the client.
func (s *sseWriter) flush() error {
	if s.err != nil {
		return s.err
	}
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
		return err
	}
	if len(s.buf) > 0 {
		_, s.err = s.w.Write(s.buf)
		s.buf = s.buf[:0]
	}
	if s.err == nil {
		s.err = s.rc.Flush()
	}
	return s.err
}
