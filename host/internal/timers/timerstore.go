package timers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// How timers are kept in the state store. The store has no key listing, so
// a rule's timers are found again through an index under the host's
// reserved prefix ReservedPrefix, which rules cannot read, write, watch or
// lock:
//
//	$ssrun/timer/<rule>/<name>       one timer's record
//	$ssrun/timers/<rule>/<shard>     the names in shard 0000..1023 of the rule's timers
//	$ssrun/timers/<rule>             the directory: which shards hold names
//
// <rule> is the rule's file name, <name> the timer's (1 to MaxTimerName
// bytes, any bytes); a name's shard is FNV-1a(name) mod 1024, four decimal
// digits. Arming a new name rewrites only its shard (about 100 names of a
// rule with 100,000 timers) and, when the shard was empty, the directory;
// re-arming a known name rewrites only its record. Every value starts with a
// format version byte (1):
//
//	record     1, deadline (int64 big-endian, Unix ms), every (int64 big-endian, ms; 0: once), payload (the rest)
//	shard      1, then per name: its length (uvarint), its bytes
//	directory  1, then a bitmap of 1024 bits (128 bytes; bit i of byte i/8 is shard i, low bit first)
//
// Writes keep the index a superset of the records: a new name enters its
// shard (and the shard the directory) before its record is written, and
// leaves it after its record is deleted; a name whose record is absent is
// dropped when the rule loads; a name listed twice is one timer. A record,
// shard or directory that does not decode (another format version, damage,
// or a record's deadline or period beyond what a rule can arm) is skipped with a log line
// naming its key, and never overwritten (it may list another version's
// timers): an unreadable directory counts as listing every shard and is
// not rewritten; an unreadable record is left in the store and in the index
// (arming its name again replaces it); an unreadable shard is left in the
// store, and arming a timer whose name falls in it fails with STORE_ERROR
// naming the key, until that key is deleted.

// ReservedPrefix starts every key the host keeps for itself (timers):
// host.ReservedPrefix, which rules cannot use.
const ReservedPrefix = "$ssrun/"

// MaxTimerName is the longest timer name, in bytes (it is part of a key).
const MaxTimerName = 256

const (
	TimerShards            = 1024
	timerFormat       byte = 1
	timerRecordHeader      = 1 + 8 + 8
)

var errTimerFormat = errors.New("not a timer value of format 1")

// The bounds of a record's numbers: a rule arms a delay and a period of at
// most a time.Duration (about 292 years), so a record past them was
// written by no host. Within them, a deadline plus a period, and the
// periods skipped up to now, cannot overflow an int64.
const (
	maxTimerEvery    = math.MaxInt64 / int64(time.Millisecond) // ms
	maxTimerDeadline = 1 << 53                                 // Unix ms, about the year 285,000
)

func TimerKey(rule, name string) string { return ReservedPrefix + "timer/" + rule + "/" + name }

func TimerDirKey(rule string) string { return ReservedPrefix + "timers/" + rule }

func TimerShardKey(rule string, shard int) string {
	return fmt.Sprintf("%stimers/%s/%04d", ReservedPrefix, rule, shard)
}

// TimerShard is the shard of the timer name.
func TimerShard(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % TimerShards)
}

func EncodeTimerRecord(deadline, every int64, payload []byte) []byte {
	b := make([]byte, timerRecordHeader, timerRecordHeader+len(payload))
	b[0] = timerFormat
	binary.BigEndian.PutUint64(b[1:], uint64(deadline))
	binary.BigEndian.PutUint64(b[9:], uint64(every))
	return append(b, payload...)
}

// DecodeTimerRecord returns a record's deadline, period and payload (which
// aliases b).
func DecodeTimerRecord(b []byte) (deadline, every int64, payload []byte, err error) {
	if len(b) < timerRecordHeader || b[0] != timerFormat {
		return 0, 0, nil, errTimerFormat
	}
	deadline = int64(binary.BigEndian.Uint64(b[1:]))
	every = int64(binary.BigEndian.Uint64(b[9:]))
	if deadline <= 0 || deadline > maxTimerDeadline || every < 0 || every > maxTimerEvery {
		return 0, 0, nil, fmt.Errorf("%w: deadline %d, every %d", errTimerFormat, deadline, every)
	}
	return deadline, every, b[timerRecordHeader:], nil
}

// EncodeTimerShard encodes names, sorted.
func EncodeTimerShard(names []string) []byte {
	slices.Sort(names)
	n := 1
	for _, s := range names {
		n += binary.MaxVarintLen16 + len(s)
	}
	b := make([]byte, 1, n)
	b[0] = timerFormat
	for _, s := range names {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func DecodeTimerShard(b []byte) ([]string, error) {
	if len(b) < 1 || b[0] != timerFormat {
		return nil, errTimerFormat
	}
	var names []string
	for b = b[1:]; len(b) > 0; {
		n, w := binary.Uvarint(b)
		if w <= 0 || n == 0 || n > MaxTimerName || uint64(len(b)-w) < n {
			return nil, fmt.Errorf("%w: bad name at byte %d", errTimerFormat, len(b))
		}
		names = append(names, string(b[w:w+int(n)]))
		b = b[w+int(n):]
	}
	return names, nil
}

// TimerDir is the directory of a rule's shards: bit i set when shard i
// holds names.
type TimerDir [TimerShards / 8]byte

func (d *TimerDir) Has(shard int) bool { return d[shard/8]&(1<<(shard%8)) != 0 }

func (d *TimerDir) Put(shard int, on bool) {
	if on {
		d[shard/8] |= 1 << (shard % 8)
	} else {
		d[shard/8] &^= 1 << (shard % 8)
	}
}

func (d *TimerDir) Empty() bool { return *d == TimerDir{} }

func (d *TimerDir) Encode() []byte { return append([]byte{timerFormat}, d[:]...) }

func DecodeTimerDir(b []byte) (TimerDir, error) {
	var d TimerDir
	if len(b) != 1+len(d) || b[0] != timerFormat {
		return d, errTimerFormat
	}
	copy(d[:], b[1:])
	return d, nil
}

// AllTimerShards is the directory an unreadable one counts as.
func AllTimerShards() TimerDir {
	var d TimerDir
	for i := range d {
		d[i] = 0xff
	}
	return d
}
