// Package contenthash gives the SHA-256 of rule files, remembering the sums of
// large contents so that the same module in many files is hashed once.
package contenthash

import (
	"bytes"
	"crypto/sha256"
	"hash/maphash"
	"sync"
)

// Rule files of at least hashMemoMin bytes have their SHA-256 remembered by
// content, up to hashMemoBytes of content in all (the oldest forgotten
// first): the same module in many files (300 copies of a 2.8 MB Go
// WebAssembly guest), or a file loaded again unchanged, is hashed once.
// A lookup is a maphash of the content and a byte comparison with the
// content remembered, several times cheaper than SHA-256. Smaller files
// are hashed each time: it costs little.
const (
	hashMemoMin   = 64 << 10
	hashMemoBytes = 16 << 20
)

// Memo is the memo of SHA-256 sums by content.
type Memo struct {
	mu    sync.Mutex
	seed  maphash.Seed
	sums  map[uint64]*hashedContent // by maphash of the content
	order []uint64                  // keys of sums, oldest first
	bytes int                       // content held
}

type hashedContent struct {
	src []byte // a copy, so no caller can change it
	sum [32]byte
}

func New() *Memo {
	return &Memo{seed: maphash.MakeSeed(), sums: map[uint64]*hashedContent{}}
}

// Sum returns the SHA-256 of src.
func (c *Memo) Sum(src []byte) [32]byte {
	if len(src) < hashMemoMin || len(src) > hashMemoBytes {
		return sha256.Sum256(src)
	}
	k := maphash.Bytes(c.seed, src)
	c.mu.Lock()
	e := c.sums[k]
	c.mu.Unlock()
	if e != nil && bytes.Equal(e.src, src) {
		return e.sum
	}
	s := sha256.Sum256(src)
	if e != nil { // another content with the same maphash keeps its place
		return s
	}
	e = &hashedContent{src: bytes.Clone(src), sum: s}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sums[k] != nil { // remembered meanwhile
		return s
	}
	for c.bytes+len(src) > hashMemoBytes && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.sums[old].src)
		delete(c.sums, old)
	}
	c.sums[k] = e
	c.order = append(c.order, k)
	c.bytes += len(src)
	return s
}
