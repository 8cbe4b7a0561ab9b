package host

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/lineage"
	"github.com/ssrun/ssrun/host/provenance"
)

// BenchmarkProvenanceMemory is what the chains and the journal hold once a
// busy host has made more rule writes than either keeps: 65,536 writes
// (the damper's ring) of distinct keys, each by a rule handling an outside
// change (one hop). Reports the damper's bytes per remembered write
// (lineage-B/write: its steps and origin now, rule names before) and the
// journal's bytes per entry and in all at its default bounds.
func BenchmarkProvenanceMemory(b *testing.B) {
	const n = 1 << 16
	var perLineage, perEntry, journalMiB float64
	for range b.N {
		runtime.GC()
		var before, mid, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lin := lineage.New(n, clock.Real{})
		for i := range n {
			from := provenance.Lineage{Origin: &provenance.Origin{Key: fmt.Sprintf("sensor/%06d/in", i), Op: "SET", Version: fmt.Sprintf("%015d:%05d:StateStore", i, 0), Client: "sensor-client"}}
			end := lin.Begin(fmt.Sprintf("sensor/%06d/out", i), "SET", from, "thermostat.lua", 0)
			end(fmt.Sprintf("%015d:%05d:StateStore", i, 1))
		}
		runtime.GC()
		runtime.ReadMemStats(&mid)
		j := provenance.NewJournal(0, 0)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		value := []byte("21.5")
		for i := range n {
			from := provenance.Lineage{Hop: 1, Origin: &provenance.Origin{Key: fmt.Sprintf("sensor/%06d/in", i), Op: "SET", Version: fmt.Sprintf("%015d:%05d:StateStore", i, 0), Client: "sensor-client"}}
			cause := provenance.Cause{Key: from.Origin.Key, Op: "SET", Version: from.Origin.Version, Client: "sensor-client"}
			j.Wrote(log, time.Now(), "thermostat.lua", fmt.Sprintf("sensor/%06d/out", i), "SET", value, fmt.Sprintf("%015d:%05d:StateStore", i, 1), cause, from)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		entries, _ := j.Size()
		perLineage = float64(mid.HeapAlloc-before.HeapAlloc) / n
		perEntry = float64(after.HeapAlloc-mid.HeapAlloc) / float64(entries)
		journalMiB = float64(after.HeapAlloc-mid.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(lin)
		runtime.KeepAlive(j)
	}
	b.ReportMetric(perLineage, "lineage-B/write")
	b.ReportMetric(perEntry, "journal-B/entry")
	b.ReportMetric(journalMiB, "journal-MiB")
}

// BenchmarkJournalWrite is the journal's cost per rule write (debug off).
func BenchmarkJournalWrite(b *testing.B) {
	j := provenance.NewJournal(0, 0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	from := provenance.Lineage{Hop: 1, Origin: &provenance.Origin{Key: "thermostat1/setPoint", Op: "SET", Version: "001795446544635:00003:StateStore", Client: "sensor"}}
	cause := provenance.Cause{Key: "thermostat1/setPoint", Op: "SET", Version: "001795446544635:00003:StateStore", Client: "sensor"}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("hvac%d/target", i)
	}
	value := []byte("28")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j.Wrote(log, time.Now(), "thermostat.lua", keys[i%len(keys)], "SET", value, "001795446544636:00000:StateStore", cause, from)
	}
}
