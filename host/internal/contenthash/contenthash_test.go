package contenthash

import (
	"bytes"
	"crypto/sha256"
	"testing"
	"time"
)

// The memo returns the SHA-256 of the content asked, remembered or not: a
// content remembered, a copy of it, a content differing in one byte, the
// caller's buffer changed after the call, and small files; it holds at most
// hashMemoBytes of content, the oldest forgotten first.
func TestContentHashes(t *testing.T) {
	c := New()
	big := bytes.Repeat([]byte("module"), hashMemoMin/6+1)
	check := func(what string, src []byte) {
		t.Helper()
		if got, want := c.Sum(src), sha256.Sum256(src); got != want {
			t.Fatalf("%s: sum %x, want %x", what, got[:6], want[:6])
		}
	}
	check("first", big)
	check("again", big)
	check("a copy", bytes.Clone(big))
	other := bytes.Clone(big)
	other[len(other)/2] ^= 1
	check("one byte changed", other)
	buf := bytes.Clone(big)
	check("a buffer", buf)
	buf[0] ^= 1 // the caller reuses its buffer
	check("the buffer changed", buf)
	check("the first content", big)
	check("small", []byte("small rule"))
	if c.bytes > hashMemoBytes || len(c.order) != len(c.sums) {
		t.Fatalf("memo holds %d bytes in %d entries (%d in order), want at most %d", c.bytes, len(c.sums), len(c.order), hashMemoBytes)
	}
	// Filling it forgets the oldest first.
	n := hashMemoBytes/len(big) + 2
	for i := range n {
		src := bytes.Clone(big)
		src[0], src[1] = byte(i), byte(i>>8)
		check("filling", src)
		if c.bytes > hashMemoBytes {
			t.Fatalf("memo holds %d bytes after %d contents, want at most %d", c.bytes, i+1, hashMemoBytes)
		}
	}
	if len(c.sums) != hashMemoBytes/len(big) || len(c.order) != len(c.sums) {
		t.Fatalf("memo holds %d contents (%d in order), want %d", len(c.sums), len(c.order), hashMemoBytes/len(big))
	}
	check("a forgotten content", big)
}

// BenchmarkContentHash compares the memo's hit (a 2.8 MB module seen
// before) with SHA-256 of the same bytes, the BASELINE, alternating.
func BenchmarkContentHash(b *testing.B) {
	src := bytes.Repeat([]byte("go wasm guest"), 2800000/13)
	c := New()
	c.Sum(src)
	var memo, plain float64
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		c.Sum(src)
		t1 := time.Now()
		_ = sha256.Sum256(src)
		t2 := time.Now()
		memo += float64(t1.Sub(t0))
		plain += float64(t2.Sub(t1))
	}
	b.ReportMetric(memo/float64(b.N)/1e3, "memo-us")
	b.ReportMetric(plain/float64(b.N)/1e3, "sha256-us")
	b.ReportMetric(memo/plain, "memo-x-sha256")
}
