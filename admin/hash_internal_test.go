package admin

import (
	"crypto/sha256"
	"testing"
)

// hashOf gives the IDs the joined strings gave (traces stay the same
// across versions) without allocating.
func TestHashOfSameIDsNoAlloc(t *testing.T) {
	if hashOf("span", "r", "k", "SET", "v") != sha256.Sum256([]byte("span\x00r\x00k\x00SET\x00v")) {
		t.Fatal("hashOf differs from the hash of the joined parts")
	}
	if n := testing.AllocsPerRun(100, func() { _ = hashOf("span", "rule.lua", "some/key", "SET", "1700000000000:0:StateStore") }); n != 0 {
		t.Errorf("hashOf: %v allocations, want 0", n)
	}
}
