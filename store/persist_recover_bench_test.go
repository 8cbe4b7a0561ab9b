package store

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// BenchmarkRecovery measures how long a store of 100,000 keys (32-byte
// values, a tenth with a deadline, a tenth fenced) takes to open: from a
// journal only ("journal": 120,000 SETs, of which 10,000 overwrite a key
// and 10,000 make keys deleted again, and those 10,000 deletions) and from
// a snapshot of the same state ("snapshot"). Metrics: ms per open, keys
// recovered, size of the directory.
//
// go test -run '^$' -bench '^BenchmarkRecovery$' -benchtime 5x -count 3 ./broker
func BenchmarkRecovery(b *testing.B) {
	const keys = 100_000
	for _, layout := range []string{"journal", "snapshot"} {
		b.Run(layout, func(b *testing.B) {
			dir := b.TempDir()
			clk := &clockT{t: time.Now()}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			pc := PersistConfig{Dir: dir, Policy: FsyncNever, CompactAt: 1 << 40, Log: log}
			s := New(clk.now, Quota{Keys: -1, Bytes: -1})
			if _, err := s.OpenData(pc); err != nil {
				b.Fatal(err)
			}
			value := []byte("0123456789abcdef0123456789abcdef")
			ft := hlc.HLC{Wall: clk.now().UnixMilli(), Node: "client"}
			for i := range keys + keys/5 { // 10% more keys, deleted below, and 10% overwrites
				k := i
				if i >= keys+keys/10 {
					k = i - keys - keys/10
				}
				a := setArgs{key: fmt.Appendf(nil, "sensor/%06d/value", k), value: value, ts: ft}
				if k%10 == 1 {
					a.px = time.Hour
				}
				if k%10 == 2 {
					a.ft = &ft
				}
				if _, _, err := s.set(a); err != nil {
					b.Fatal(err)
				}
			}
			for i := range keys / 10 {
				if _, _, err := s.del(fmt.Appendf(nil, "sensor/%06d/value", keys+i), nil, &ft, ""); err != nil {
					b.Fatal(err)
				}
			}
			if layout == "snapshot" {
				if err := s.compact(); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var got int
			for range b.N {
				s := New(clk.now, Quota{Keys: -1, Bytes: -1})
				rec, err := s.OpenData(pc)
				if err != nil {
					b.Fatal(err)
				}
				got = rec.Keys
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			if got != keys {
				b.Fatalf("recovered %d keys, want %d", got, keys)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/open")
			b.ReportMetric(float64(got), "keys")
			b.ReportMetric(float64(dirBytes(b, dir))/1e6, "MB-on-disk")
		})
	}
}

func dirBytes(b *testing.B, dir string) int64 {
	des, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			b.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
