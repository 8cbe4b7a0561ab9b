package abitest_test

import (
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// BenchmarkStore is the cost of abitest's store verbs called from Go, with
// no runtime in between: the store's share of the runtimes' verb
// benchmarks, which call the same store (runtime/wasm's BenchmarkVerbs,
// bench's BenchmarkVerbs). The rows are theirs: get of a 16-byte value,
// set of one, del failing with NOT_FOUND, vdel failing with NOT_APPLIED.
func BenchmarkStore(b *testing.B) {
	value := []byte("0123456789abcdef")
	for _, row := range []struct {
		name string
		call func(s *abitest.Store) error
		want abi.Status
	}{
		{"get", func(s *abitest.Store) error { _, err := s.Get(ctx, "bench/k"); return err }, abi.StatusOK},
		{"set", func(s *abitest.Store) error { _, err := s.Set(ctx, "bench/k", value, abi.SetOptions{}); return err }, abi.StatusOK},
		{"del", func(s *abitest.Store) error { return s.Del(ctx, "bench/none", abi.DelOptions{}) }, abi.StatusNotFound},
		{"vdel", func(s *abitest.Store) error { return s.VDel(ctx, "bench/k", []byte("other"), abi.DelOptions{}) }, abi.StatusNotApplied},
	} {
		b.Run(row.name, func(b *testing.B) {
			s := abitest.NewStore()
			s.Put("bench/k", value)
			b.ReportAllocs()
			for b.Loop() {
				if err := row.call(s); abi.StatusOf(err) != row.want {
					b.Fatalf("%s: %v, want %s", row.name, err, row.want)
				}
			}
		})
	}
}
