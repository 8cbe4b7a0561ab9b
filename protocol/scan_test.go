package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// scripted is a Local store answering SCAN requests from a script, and
// recording them.
type scripted struct {
	mu       sync.Mutex
	requests []string
	replies  []string // one per request; "fail" ends the connection instead
}

func (s *scripted) Open(string, func(key, payload []byte, ts, src string)) (LocalConn, error) {
	return s, nil
}
func (s *scripted) Do(payload []byte, _, _ string) ([]byte, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, string(payload))
	r := s.replies[0]
	s.replies = s.replies[1:]
	return []byte(r), ""
}
func (s *scripted) MaxPacketSize() int { return 0 }
func (s *scripted) Close()             {}

func scriptedClient(t *testing.T, replies ...string) (*Client, *scripted) {
	t.Helper()
	s := &scripted{replies: replies}
	c, err := NewLocal(context.Background(), Config{ClientID: "scanner", Logger: slog.New(slog.DiscardHandler)}, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, s
}

// Pages are fetched lazily, one request each, the token sent back as it
// came (binary bytes included); an empty page with a token goes on.
func TestScanPagesLazily(t *testing.T) {
	c, s := scriptedClient(t,
		"*2\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n$3\r\n\x00\xffx\r\n",
		"*2\r\n*0\r\n$4\r\n1;1;\r\n",
		"*1\r\n*1\r\n$4\r\nkey3\r\n")
	p := c.Scan([]byte("key*"), ScanOptions{})
	var pages []string
	for p.Next(context.Background()) {
		pages = append(pages, fmt.Sprintf("%q", p.Keys()))
		if len(pages) == 1 && len(s.requests) != 1 {
			t.Fatalf("%d requests before the first page was used, want 1", len(s.requests))
		}
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pages, " "); got != `["key1" "key2"] ["key3"]` {
		t.Fatalf("pages %s", got)
	}
	want := []string{
		"*2\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n",
		"*3\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n$3\r\n\x00\xffx\r\n",
		"*3\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n$4\r\n1;1;\r\n",
	}
	if fmt.Sprintf("%q", s.requests) != fmt.Sprintf("%q", want) {
		t.Fatalf("requests %q, want %q", s.requests, want)
	}
}

// Every malformed reply of scan.md is refused with a clear error, and the
// same page is asked for again by the next Next.
func TestScanRefusesMalformedRepliesAndRetries(t *testing.T) {
	for _, bad := range []string{"*0\r\n", "*3\r\n*0\r\n$1\r\na\r\n$1\r\nb\r\n", "*1\r\n$1\r\nk\r\n", "*1\r\n*-1\r\n", "*1\r\n*1\r\n$-1\r\n", "*2\r\n*0\r\n", "*1\r\n*0\r\nxx", ":1\r\n"} {
		c, s := scriptedClient(t, "*2\r\n*1\r\n$1\r\na\r\n$2\r\nt1\r\n", bad, "*1\r\n*1\r\n$1\r\nb\r\n")
		var got []string
		for k, err := range c.Keys(context.Background(), []byte("*"), ScanOptions{}) {
			if err != nil {
				if !errors.Is(err, ErrUnexpectedReply) {
					t.Errorf("%q: %v, want ErrUnexpectedReply", bad, err)
				}
				break
			}
			got = append(got, string(k))
		}
		if strings.Join(got, ",") != "a" {
			t.Errorf("%q: keys %q before the error", bad, got)
		}
		// A Pager resumes at the failed page.
		s.replies = []string{bad, "*1\r\n*1\r\n$1\r\nb\r\n"}
		s.requests = nil
		p := c.Scan([]byte("*"), ScanOptions{})
		p.token = []byte("t1")
		if p.Next(context.Background()) || p.Err() == nil {
			t.Fatalf("%q: Next succeeded", bad)
		}
		if !p.Next(context.Background()) || string(p.Keys()[0]) != "b" {
			t.Fatalf("%q: the retry: %v %q", bad, p.Err(), p.Keys())
		}
		if s.requests[0] != s.requests[1] {
			t.Errorf("%q: the retry sent %q, the failed page %q", bad, s.requests[1], s.requests[0])
		}
	}
	c, _ := scriptedClient(t, "-ERR syntax error\r\n")
	for _, err := range c.Keys(context.Background(), []byte("["), ScanOptions{}) {
		if !errors.Is(err, ErrSyntax) {
			t.Fatalf("a -ERR reply: %v, want ErrSyntax", err)
		}
	}
	if p := c.Scan(nil, ScanOptions{}); p.Next(context.Background()) || !errors.Is(p.Err(), ErrKeyLengthZero) {
		t.Fatalf("empty pattern: %v", p.Err())
	}
}
