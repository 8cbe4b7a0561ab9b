package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/ssrun/ssrun/internal/glob"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// This file is SCAN (statestore-protocol.md §6.1): listing the keys that
// match a glob pattern, a page at a time, over an ordered index of the
// keys.
//
//   - The pattern is the ACL's glob (internal/glob), matched against the
//     whole key. Its literal prefix bounds the walk: the index is entered
//     at the prefix (or after the token's key) and left at the first key
//     without it.
//   - A page holds at most scanPageKeys keys and at most the reply size the
//     requester can take (Request.MaxReplyBytes), and a page examines at
//     most scanPageWork keys (fewer for a long pattern, whose matches cost
//     more), so one page costs the same whatever the store holds; a page
//     that examined its share without filling may be empty and carry a
//     token, which the protocol allows.
//   - The token names the last key examined; the next page starts after
//     it. Every key present for the whole scan is returned exactly once:
//     keys are walked in order, and nothing a write does moves a key
//     relative to another. A key created or deleted during the scan may
//     or may not appear.
//   - The token is bound to its pattern and to this store by a MAC with a
//     key drawn when the store starts: a forged token, one of another
//     pattern or of a store since restarted is refused (-ERR syntax error)
//     before any work.
//   - Keys the requester may not read (Request.Allow) are not listed;
//     expired keys are not either, nor keys longer than scanKeyMax (64 KiB)
//     or than fit in a reply the requester can take.

// Page bounds of SCAN.
const (
	scanPageKeys = 1000
	// scanPageWork bounds what one page examines: a key costs 1, plus one
	// per matchStepsPerUnit steps its match may take.
	scanPageWork      = 10000
	matchStepsPerUnit = 4096
	// scanReplyBytes bounds a reply when the request gives no bound
	// (Request.MaxReplyBytes).
	scanReplyBytes = 1 << 20
	// scanKeyMax bounds the keys SCAN lists: a longer key is never listed
	// (a token naming it could not fit a reply); nothing else limits keys.
	scanKeyMax = 64 << 10
	// tokenVersion starts every token; tokenMAC is its MAC's size.
	tokenVersion = "1;"
	tokenMAC     = 16
)

// keyIndex is the keys in order.
type keyIndex = btree.BTreeG[string]

func newKeyIndex() *keyIndex { return btree.NewOrderedG[string](32) }

// newScanKey draws the key of a store's tokens.
func newScanKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// tokenMACOf is the MAC of a token for pattern that resumes after key.
func (s *Store) tokenMACOf(pattern []byte, key string) []byte {
	m := hmac.New(sha256.New, s.scanKey)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(pattern)))
	m.Write(n[:])
	m.Write(pattern)
	m.Write([]byte(key))
	return m.Sum(nil)[:tokenMAC]
}

// token is the continuation token of pattern after key: "1;", the MAC in
// hex, ";", the key's bytes.
func (s *Store) token(pattern []byte, key string) []byte {
	t := make([]byte, 0, len(tokenVersion)+2*tokenMAC+1+len(key))
	t = append(t, tokenVersion...)
	t = hex.AppendEncode(t, s.tokenMACOf(pattern, key))
	t = append(t, ';')
	return append(t, key...)
}

// resume returns the key a token resumes after; ok=false for a token
// that is malformed, forged, of another pattern or of another store.
func (s *Store) resume(pattern, token []byte) (key string, ok bool) {
	rest, found := bytes.CutPrefix(token, []byte(tokenVersion))
	if !found || len(rest) < 2*tokenMAC+1 || rest[2*tokenMAC] != ';' {
		return "", false
	}
	mac := make([]byte, tokenMAC)
	if _, err := hex.Decode(mac, rest[:2*tokenMAC]); err != nil {
		return "", false
	}
	key = string(rest[2*tokenMAC+1:])
	return key, hmac.Equal(mac, s.tokenMACOf(pattern, key))
}

// execScan runs SCAN pattern [token].
func (s *Store) execScan(req Request, pattern, token []byte) Reply {
	g, err := glob.Compile(string(pattern), nil)
	if err != nil {
		return errReply(wire.ErrTextSyntax)
	}
	prefix := g.Prefix()
	after, resumed := "", false
	if token != nil {
		if after, resumed = s.resume(pattern, token); !resumed {
			return errReply(wire.ErrTextSyntax)
		}
	}
	s.observeTS(req.TS)
	maxBytes := req.MaxReplyBytes
	if maxBytes <= 0 {
		maxBytes = scanReplyBytes
	}
	// A reply's own bytes: its two array headers and a token's, its key
	// aside.
	fixed := 32 + len(tokenVersion) + 2*tokenMAC + 1

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var keys [][]byte
	size, last, work, full := fixed, "", 0, false
	start := prefix
	if resumed && after > start {
		start = after
	}
	s.index.AscendGreaterOrEqual(start, func(k string) bool {
		switch {
		case !strings.HasPrefix(k, prefix):
			return false // no later key matches: the last page
		case resumed && k == after:
			return true // the page before ended on it
		case len(k) > scanKeyMax || fixed+resp.KeySize([]byte(k))+len(k) > maxBytes:
			return true // too long for any page: never listed, never in a token
		case work >= scanPageWork || len(keys) == scanPageKeys:
			full = true
			return false
		}
		kb := []byte(k)
		listed := g.Match(kb, nil) && req.allowed(Read, kb) && s.live(k, now)
		need := len(k) // the token, should the page end on k
		if listed {
			need += resp.KeySize(kb)
		}
		if size+need > maxBytes {
			full = true // k fits an empty page: the next one
			return false
		}
		// Matching costs up to len(pattern)*len(key) steps: a long pattern
		// examines fewer keys a page.
		work += 1 + len(pattern)*len(k)/matchStepsPerUnit
		if listed {
			keys = append(keys, kb)
			size += resp.KeySize(kb)
		}
		last = k
		return true
	})
	if !full {
		return Reply{Payload: resp.AppendScanReply(nil, keys, nil)}
	}
	return Reply{Payload: resp.AppendScanReply(nil, keys, s.token(pattern, last))}
}

// live reports whether key is stored and not expired. An expired key is
// left to the expiry loop: SCAN only reads.
func (s *Store) live(key string, now time.Time) bool {
	e := s.entries[key]
	return e != nil && (e.expires.IsZero() || now.Before(e.expires))
}
