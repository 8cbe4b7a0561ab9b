package protocol

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/ssrun/ssrun/protocol/resp"
)

// This file is SCAN (statestore-protocol.md §6.1): the keys matching a
// glob pattern, a page per request, strictly one after another (a page's
// request carries the token of the reply before it). The token stays
// inside the Pager; a failed page is tried again by the next Next.

const cmdScan = "scan"

var bScan = []byte("SCAN")

// ScanOptions are the options of Scan and Keys.
type ScanOptions struct {
	// Timeout overrides Config.Timeout for each page's request.
	Timeout time.Duration
}

// Pager lists the keys matching a pattern, lazily: each Next is one
// request (more when the store answers pages without keys, which it may
// while it walks keys that do not match). It is not safe for concurrent
// use.
type Pager struct {
	c       *Client
	pattern []byte
	opts    ScanOptions
	token   []byte // of the reply before; nil before the first
	done    bool
	keys    [][]byte
	err     error
}

// Scan returns a Pager of the keys matching pattern (the store's glob: `*`
// any run of characters, `?` one, `[a-z]`, `\x`; matched against the whole
// key). An empty pattern is refused locally (ErrKeyLengthZero), as the
// store would.
func (c *Client) Scan(pattern []byte, opts ScanOptions) *Pager {
	return &Pager{c: c, pattern: slices.Clone(pattern), opts: opts}
}

// Next fetches the next page with keys and reports whether there is one;
// false at the end or on an error (Err). After an error a later Next tries
// the same page again.
func (p *Pager) Next(ctx context.Context) bool {
	p.err, p.keys = nil, nil
	for !p.done { // an empty pattern: ScanPage refuses it, as the store would
		keys, next, err := p.c.ScanPage(ctx, p.pattern, p.token, p.opts)
		if err != nil {
			p.err = err
			return false
		}
		p.token, p.done = next, next == nil
		if len(keys) > 0 {
			p.keys = keys
			return true
		}
	}
	return false
}

// ScanPage is one SCAN request: the keys of the page that token (nil: the
// first page) continues, and the token of the page after it, nil after
// the last. A page may hold no keys and still have a next (the store
// walked keys that do not match). Pager calls it page after page; a
// caller that pages across requests of its own (a web page's next link)
// keeps the token. A token is the store's: one it refuses (malformed,
// forged, of another pattern) fails the request.
func (c *Client) ScanPage(ctx context.Context, pattern, token []byte, opts ScanOptions) (keys [][]byte, next []byte, err error) {
	if err := checkKey(cmdScan, pattern); err != nil {
		return nil, nil, err
	}
	args := [][]byte{bScan, pattern}
	if token != nil {
		args = append(args, token)
	}
	rep, err := c.call(ctx, cmdScan, pattern, args, callOpts{timeout: opts.Timeout})
	if err != nil {
		return nil, nil, err
	}
	if rep.r.Kind != resp.KindArray {
		return nil, nil, fmt.Errorf("protocol: %s %s: %w", cmdScan, keyText(pattern), unexpected(rep.r))
	}
	keys, tok, more, err := resp.ParseScanReply(rep.r.Str)
	if err != nil {
		return nil, nil, fmt.Errorf("protocol: %s %s: %w: %w", cmdScan, keyText(pattern), ErrUnexpectedReply, err)
	}
	if more {
		next = slices.Clone(tok)
	}
	return keys, next, nil
}

// Keys returns the keys of the page Next fetched. They are the page's own
// (not reused by the next page).
func (p *Pager) Keys() [][]byte { return p.keys }

// Err returns the error that ended the last Next, if any.
func (p *Pager) Err() error { return p.err }

// Keys iterates over every key matching pattern, page by page (Scan). On an
// error it yields it with a nil key and stops.
func (c *Client) Keys(ctx context.Context, pattern []byte, opts ScanOptions) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		p := c.Scan(pattern, opts)
		for p.Next(ctx) {
			for _, k := range p.Keys() {
				if !yield(k, nil) {
					return
				}
			}
		}
		if err := p.Err(); err != nil {
			yield(nil, err)
		}
	}
}
