package ssrun

import "unsafe"

// Small results (get's value and version, set's version, lock's token)
// live in shared blocks of blockSize bytes instead of one heap allocation
// each: an allocation costs a Go guest about eight host calls
// (runtime/wasm BenchmarkGuestSteps). The verbs have the host write the
// result record into the rest of the current block, at least maxCarve
// bytes (so a result of at most maxCarve bytes always fits), and keep it
// there; a longer record that does not fit is fetched into an allocation
// of its own. Each result gets its own bytes, never written again, so
// results of different calls do not alias; but one that is kept keeps its
// whole block alive (a rule that keeps many long-lived results should
// bytes.Clone or strings.Clone them).

const (
	// blockSize is the size of a shared result block.
	blockSize = 1 << 10
	// maxCarve is the largest result carved from a block.
	maxCarve = 128
)

// block is the unused rest of the current result block. Guarded by the
// guard (enter, leave).
var block []byte

// newBlock starts a new result block. Call with the guard held.
//
//go:noinline
func newBlock() { block = make([]byte, blockSize) }

// carve returns n bytes of their own, from the current block when n is
// at most maxCarve (for a result fetched into a buffer of its own, to be
// copied). Call with the guard held.
func carve(n int) []byte {
	if n <= len(block) {
		b := block[:n:n]
		block = block[n:]
		return b
	}
	return carveSlow(n)
}

// carveSlow is carve when the current block is short: a new block, or an
// allocation of its own for a result larger than maxCarve.
//
//go:noinline
func carveSlow(n int) []byte {
	if n > maxCarve {
		return make([]byte, n)
	}
	block = make([]byte, blockSize)
	b := block[:n:n]
	block = block[n:]
	return b
}

// carveString returns a copy of b as a string carved like carve's bytes.
// Call with the guard held.
func carveString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c := carve(len(b))
	copy(c, b)
	return unsafe.String(&c[0], len(c)) // never written again
}
