package broker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
	"github.com/ssrun/ssrun/store"
)

// The crash test: a real `ssrun broker --data DIR` process is killed with
// SIGKILL at random moments while several clients write, and restarted on
// the same directory, again and again. After every restart each key must
// hold exactly what its last acknowledged write left (value and version),
// or what the write in flight at the kill would have left; deleted keys
// stay deleted, keys with a deadline still expire (GET miss after it, or a
// DELETE notification no earlier than it), fenced keys still refuse an
// older token with the exact -ERR text, and the next version is above every
// version seen before. The fsync policy changes at every restart: all three
// must survive a process crash (only an OS crash tells them apart).
//
// Some values are made of journal frames: whole valid frames of other
// records, copied from the directory's segments and snapshot (whose frames
// are those of journal format 1) as they are at the time, repeated up to
// 3 MiB, so that they hold frames of several segments. Half of the kills
// land shortly after such a write is sent, while the broker receives or
// writes it: recovery must cut off a record torn in the middle of frames
// like any other, never refuse to start.
//
// Environment (for long runs by hand):
//
//	SSRUN_CRASH_KILLS=200  number of kills (default 5)
//	SSRUN_CRASH_SEED=42    random seed (default: time; logged)
const (
	crashKillsEnv = "SSRUN_CRASH_KILLS"
	crashSeedEnv  = "SSRUN_CRASH_SEED"
	crashWorkers  = 4
)

func TestCrashRecovery(t *testing.T) {
	kills, seed := 5, uint64(time.Now().UnixNano())
	if v := os.Getenv(crashKillsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", crashKillsEnv, v)
		}
		kills = n
	}
	if v := os.Getenv(crashSeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a number", crashSeedEnv, v)
		}
		seed = n
	}
	t.Logf("%d kills, seed %d (rerun with %s=%d)", kills, seed, crashSeedEnv, seed)
	bin := filepath.Join(t.TempDir(), "ssrun")
	if err := gobuild.Exe(bin, "github.com/ssrun/ssrun/cmd/ssrun"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	dir := t.TempDir()
	m := newCrashModel(dir)
	policies := []string{"always", "interval", "never"}
	for round := 0; ; round++ {
		ch := startChild(t, bin, dir, policies[round%len(policies)])
		m.verify(t, ch)
		if round == kills {
			ch.stop(t)
			break
		}
		m.run(t, ch, rng)
	}
	t.Logf("%d kills, %d restarts; %d write requests acknowledged (%d applied, %d of them values of journal frames), %d in flight at a kill (%d found applied after the restart); "+
		"%d expiries checked by notification, %d by GET miss; %d fenced refusals; %d interrupted writes cut off at recovery (%d of them over %d bytes: values of frames); "+
		"%d snapshots written, %d recoveries from a snapshot",
		kills, kills, m.acked, m.applied, m.framesAcked, m.inFlight, m.adopted, m.expiryNotes, m.expiryMisses, m.fenceChecks, m.torn, m.tornBig, tornBig,
		m.snapshots, m.fromSnapshot)
}

// child is one `ssrun broker` process.
type child struct {
	cmd  *exec.Cmd
	addr string
	out  *testutil.Buffer // its stdout and stderr
	done chan struct{}
}

var (
	listeningLine = regexp.MustCompile(`state store listening on (\S+)`)
	cutLine       = regexp.MustCompile(`cut off an incomplete record.* bytes=(\d+)`)
)

func startChild(t *testing.T, bin, dir, policy string) *child {
	t.Helper()
	cmd := exec.Command(bin, "broker", "--listen", "127.0.0.1:0", "--data", dir, "--fsync", policy, "--fsync-interval", "20ms",
		"--snapshot-bytes", "8192") // a snapshot every 50 or so writes: kills land in the middle of some

	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, out: &testutil.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = c.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(c.out, line)
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		_ = cmd.Wait() // after the last read of stdout, as exec requires
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	select {
	case c.addr = <-addr:
	case <-c.done:
		t.Fatalf("ssrun broker exited before listening:\n%s", c.out)
	case <-time.After(wait):
		t.Fatalf("ssrun broker not listening after %v:\n%s", wait, c.out)
	}
	return c
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill(t *testing.T) {
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}

// stop ends the process cleanly (SIGTERM) and checks its exit status.
func (c *child) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(wait):
		t.Fatalf("ssrun broker did not stop on SIGTERM:\n%s", c.out)
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("ssrun broker exit status %d:\n%s", code, c.out)
	}
}

// tornBig is the size past which a record cut off at recovery can only be
// a value of frames (the other values are a few bytes).
const tornBig = 4096

// keyState is what a key holds after its last acknowledged write.
type keyState struct {
	present        bool
	value, version string
	lo, hi         time.Time // deadline window [sent+px, acked+px]; zero: none
	fence          string    // token protecting it; "" none
}

func (st keyState) String() string {
	return fmt.Sprintf("{present:%v value:%s version:%s lo:%v hi:%v fence:%s}", st.present, clip(st.value), st.version, st.lo, st.hi, st.fence)
}

// clip shortens a value of frames for a message.
func clip(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:32], len(s))
}

func clipArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = clip(a)
	}
	return out
}

// pendingOp is a write whose reply never came (in flight at the kill):
// what the key holds if it was applied.
type pendingOp struct {
	key    string
	del    bool // applied: absent
	value  string
	px     time.Duration
	sent   time.Time
	killed time.Time // set at the kill: the latest it can have been applied
	fence  string
	big    bool // a value of frames
}

func (p *pendingOp) String() string {
	return fmt.Sprintf("{key:%s del:%v value:%s px:%v sent:%v killed:%v fence:%s}", p.key, p.del, clip(p.value), p.px, p.sent, p.killed, p.fence)
}

type crashWorker struct {
	id      int
	keys    map[string]*keyState
	pending *pendingOp
	token   string // the lock's version: the fencing token
	seq     int
}

// Keys of a worker: plain, NX, PX, its lock and the key fenced by it.
var (
	plainKeys = []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	nxKeys    = []string{"nx0", "nx1"}
	pxKeys    = []string{"x0", "x1", "x2"}
)

func (w *crashWorker) key(k string) string { return fmt.Sprintf("w%d/%s", w.id, k) }
func (w *crashWorker) holder() string      { return fmt.Sprintf("w%d", w.id) }

type crashModel struct {
	dir     string // the data directory
	mu      sync.Mutex
	workers []*crashWorker
	max     hlc.HLC       // highest version seen
	bigSent chan struct{} // cap 1: a value of frames was sent

	acked, applied, inFlight, adopted      int
	expiryNotes, expiryMisses, fenceChecks int
	torn, snapshots, fromSnapshot          int
	framesAcked, tornBig                   int
}

func newCrashModel(dir string) *crashModel {
	m := &crashModel{dir: dir, bigSent: make(chan struct{}, 1)}
	for i := range crashWorkers {
		w := &crashWorker{id: i, keys: map[string]*keyState{}}
		for _, k := range append(append(append(append([]string{}, plainKeys...), nxKeys...), pxKeys...), "lock", "fenced", "frames") {
			w.keys[w.key(k)] = &keyState{}
		}
		m.workers = append(m.workers, w)
	}
	return m
}

// see records a version; workers call it too.
func (m *crashModel) see(ts string) error {
	if ts == "" {
		return nil
	}
	h, err := hlc.Parse(ts)
	if err != nil {
		return fmt.Errorf("__ts %q: %w", ts, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.Compare(m.max) > 0 {
		m.max = h
	}
	return nil
}

// count adds one to a counter; workers call it too.
func (m *crashModel) count(n *int) {
	m.mu.Lock()
	*n++
	m.mu.Unlock()
}

// run lets the workers write until the broker is killed at a random moment
// after each of them had a write acknowledged.
func (m *crashModel) run(t *testing.T, ch *child, rng *rand.Rand) {
	t.Helper()
	var wg sync.WaitGroup
	started := make(chan struct{}, crashWorkers)
	errs := make(chan error, crashWorkers)
	for _, w := range m.workers {
		c, err := tryDial(t, ch.addr)
		if err != nil {
			t.Fatal(err)
		}
		wrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for {
				ok, err := m.step(c, w, wrng)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					return // the broker is gone
				}
				if first {
					first = false
					started <- struct{}{}
				}
			}
		}()
	}
	for range crashWorkers {
		select {
		case <-started:
		case err := <-errs:
			ch.kill(t)
			wg.Wait()
			t.Fatal(err)
		case <-time.After(wait):
			t.Fatalf("a worker had no write acknowledged within %v:\n%s", wait, ch.out)
		}
	}
	// A random moment (not a wait for anything), or the middle of the
	// write of a value of frames, when one is seen within a second.
	if rng.IntN(2) == 0 {
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
	} else {
		m.awaitBigWrite(t)
	}
	killed := time.Now()
	ch.kill(t)
	m.snapshots += strings.Count(ch.out.String(), "state store snapshot written")
	if strings.Contains(ch.out.String(), "snapshot failed") {
		t.Fatalf("a snapshot failed:\n%s", ch.out)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, w := range m.workers {
		if w.pending != nil {
			w.pending.killed = killed
			m.inFlight++
		}
	}
}

// awaitBigWrite returns once the broker is seen in the middle of writing a
// record of more than tornBig bytes (the newest segment has grown by more
// than that since a value of frames was sent, and the write goes on), or
// after a second.
func (m *crashModel) awaitBigWrite(t *testing.T) {
	select {
	case <-m.bigSent: // an old one
	default:
	}
	deadline := time.After(time.Second)
	select {
	case <-m.bigSent:
	case <-deadline:
		return
	}
	base := map[string]int64{}
	for {
		select {
		case <-deadline:
			return
		default:
		}
		segs, err := filepath.Glob(filepath.Join(m.dir, "journal-*.log"))
		if err != nil || len(segs) == 0 {
			t.Fatalf("no journal segment in %s (%v)", m.dir, err)
		}
		newest := slices.Max(segs)
		fi, err := os.Stat(newest)
		if err != nil {
			continue // replaced meanwhile
		}
		if b, ok := base[newest]; !ok {
			base[newest] = fi.Size()
		} else if fi.Size() > b+tornBig {
			return
		}
	}
}

// step sends one random write for w and checks its reply against the
// model. ok=false: the connection dropped with the write in flight
// (w.pending says what it would have done).
func (m *crashModel) step(c *client, w *crashWorker, rng *rand.Rand) (ok bool, err error) {
	w.seq++
	val := fmt.Sprintf("w%d-%d", w.id, w.seq)
	var args []string
	var ft string
	p := &pendingOp{sent: time.Now()}
	switch op := rng.IntN(11); {
	case op == 10:
		p.key, p.big = w.key("frames"), true
		v, err := framesValue(m.dir, val, 16<<10+rng.IntN(3<<20))
		if err != nil {
			return false, fmt.Errorf("worker %d: %w", w.id, err)
		}
		p.value = v
		args = []string{"SET", p.key, v}
	case op < 3:
		p.key, p.value = w.key(plainKeys[rng.IntN(len(plainKeys))]), val
		args = []string{"SET", p.key, val}
	case op == 3:
		p.key, p.value = w.key(nxKeys[rng.IntN(len(nxKeys))]), val
		args = []string{"SET", p.key, val, "NX"}
	case op == 4:
		k := append(append([]string{}, plainKeys...), nxKeys...)[rng.IntN(len(plainKeys)+len(nxKeys))]
		p.key, p.del = w.key(k), true
		args = []string{"DEL", p.key}
	case op == 5:
		p.key, p.del = w.key(plainKeys[rng.IntN(len(plainKeys))]), true
		match := w.keys[p.key].value
		if rng.IntN(2) == 0 {
			match = "wrong"
		}
		args = []string{"VDEL", p.key, match}
	case op < 8:
		p.key, p.value, p.px = w.key(pxKeys[rng.IntN(len(pxKeys))]), val, time.Duration(200+rng.IntN(1300))*time.Millisecond
		args = []string{"SET", p.key, val, "PX", strconv.Itoa(int(p.px.Milliseconds()))}
	case op == 8 || w.token == "":
		p.key, p.value, p.px = w.key("lock"), w.holder(), 10*time.Minute
		args = []string{"SET", p.key, p.value, "NEX", "PX", strconv.Itoa(int(p.px.Milliseconds()))}
	default:
		p.key, p.value, p.fence, ft = w.key("fenced"), val, w.token, w.token
		args = []string{"SET", p.key, val}
	}
	st := w.keys[p.key]
	w.pending = possibleEffect(p, st, args)
	req := c.request(resp.EncodeRequest(toBytes(args)...))
	if ft != "" {
		req.Properties.User.Add(wire.PropFencingToken, ft)
	}
	if p.big {
		select {
		case m.bigSent <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	r, _, err := c.exchange(ctx, req)
	cancel()
	if err != nil {
		select { // paho may report the lost connection before it closes Done
		case <-c.pc.Done():
			return false, nil // the broker is gone
		case <-time.After(wait):
			return false, fmt.Errorf("worker %d: %s: %w (and the connection is still up)", w.id, clipArgs(args), err)
		}
	}
	w.pending = nil
	m.count(&m.acked)
	if err := m.see(r.ts); err != nil {
		return false, err
	}
	got := string(r.payload)
	fail := func() error {
		return fmt.Errorf("worker %d: %s replied %s __ts=%q; the model had %v", w.id, clipArgs(args), clip(got), r.ts, *st)
	}
	switch args[0] {
	case "SET":
		exists := st.present && (st.hi.IsZero() || time.Now().Before(st.lo))
		switch {
		case got == "+OK\r\n":
			if exists && len(args) == 4 && args[3] == "NX" {
				return false, fail()
			}
			m.count(&m.applied)
			if p.big {
				m.count(&m.framesAcked)
			}
			*st = keyState{present: true, value: p.value, version: r.ts, fence: st.fence}
			if p.px > 0 {
				st.lo, st.hi = p.sent.Add(p.px), time.Now().Add(p.px)
			}
			if p.fence != "" {
				st.fence = p.fence
			}
			if p.key == w.key("lock") {
				w.token = r.ts
			}
		case got == ":-1\r\n" && len(args) == 4 && args[3] == "NX" && st.present && r.ts == st.version:
		default:
			return false, fail()
		}
	case "DEL", "VDEL":
		switch {
		case got == ":1\r\n" && st.present && r.ts == st.version && (args[0] == "DEL" || args[2] == st.value):
			m.count(&m.applied)
			*st = keyState{}
		case got == ":0\r\n" && !st.present:
		case got == ":-1\r\n" && st.present && args[0] == "VDEL" && args[2] != st.value && r.ts == st.version:
		default:
			return false, fail()
		}
	}
	return true, nil
}

// possibleEffect is p if the write can change the key, nil if it cannot
// whatever happens (NX on a present key, DEL of an absent one, VDEL of
// another value).
func possibleEffect(p *pendingOp, st *keyState, args []string) *pendingOp {
	switch {
	case len(args) == 4 && args[3] == "NX" && st.present,
		p.del && !st.present,
		args[0] == "VDEL" && args[2] != st.value:
		return nil
	}
	return p
}

// verify checks every key against the model after a restart, then the
// fences, the clock and the expiries.
func (m *crashModel) verify(t *testing.T, ch *child) {
	t.Helper()
	for _, l := range cutLine.FindAllStringSubmatch(ch.out.String(), -1) {
		m.torn++
		if n, _ := strconv.Atoi(l[1]); n > tornBig {
			m.tornBig++
		}
	}
	if !strings.Contains(ch.out.String(), `snapshot=""`) {
		m.fromSnapshot++
	}
	c, err := tryDial(t, ch.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	// Registered first, so no expiry of a key found present is missed.
	for _, w := range m.workers {
		for _, k := range pxKeys {
			c.keyNotify(w.key(k))
		}
	}
	expiring := map[string]*keyState{}
	for _, w := range m.workers {
		for key, st := range w.keys {
			before := time.Now()
			r := c.call("GET", key)
			after := time.Now()
			m.mustSee(t, r.ts)
			switch outcome, err := reconcile(t, key, st, w.pending, r, before, after); {
			case err != nil:
				t.Fatalf("after restart: %v\nbroker output:\n%s", err, ch.out)
			case outcome == foundInFlight:
				m.adopted++
			case outcome == foundExpired:
				m.expiryMisses++
			}
			if st.present && !st.hi.IsZero() && strings.Contains(key, "/x") {
				expiring[key] = st
			}
			if key == w.key("lock") && st.present {
				w.token = st.version
			}
		}
		w.pending = nil
	}
	for _, w := range m.workers {
		st := w.keys[w.key("fenced")]
		if st.fence == "" {
			continue
		}
		older := mustHLC(t, st.fence)
		older.Wall--
		expectPayload(t, c.do(older.String(), "SET", w.key("fenced"), "late"), "-ERR "+wire.ErrTextFencingTokenLower+"\r\n")
		expectPayload(t, c.call("SET", w.key("fenced"), "late"), "-ERR "+wire.ErrTextMissingFencingToken+"\r\n")
		m.fenceChecks++
	}
	probe := c.call("SET", "probe", "x")
	if v := mustHLC(t, probe.ts); v.Compare(m.max) <= 0 {
		t.Fatalf("version after restart %s is not above %s, seen before", probe.ts, m.max)
	}
	m.mustSee(t, probe.ts)
	for len(expiring) > 0 {
		n := c.nextNote()
		st, ok := expiring[string(n.key)]
		if !ok {
			continue // an expiry between KEYNOTIFY and GET, already counted
		}
		if n.op != resp.OpDelete || time.Now().Before(st.lo) {
			t.Fatalf("%s: notification %s at %v, want DELETE no earlier than %v", n.key, n.op, time.Now(), st.lo)
		}
		m.mustSee(t, n.ts)
		*st = keyState{}
		m.expiryNotes++
		delete(expiring, string(n.key))
	}
}

// Outcomes of reconcile.
const (
	foundAcked    = iota // the last acknowledged state
	foundInFlight        // the write in flight at the kill, applied
	foundExpired         // the last acknowledged state, past its deadline
)

// reconcile checks one key read after a restart: it must show the last
// acknowledged state (absent once its deadline may have passed), or the
// effect of the write in flight at the kill (p, for any key). The model
// becomes what was found.
func reconcile(t *testing.T, key string, st *keyState, p *pendingOp, r result, before, after time.Time) (int, error) {
	if p != nil && p.key != key {
		p = nil
	}
	got := string(r.payload)
	expired := st.present && !st.hi.IsZero() && !before.Before(st.lo) // the deadline may have passed
	ackPresent := st.present && (st.hi.IsZero() || after.Before(st.hi))
	if got == "$-1\r\n" {
		switch {
		case !st.present:
			return foundAcked, nil
		case expired:
			*st = keyState{}
			return foundExpired, nil
		case p != nil && (p.del || (p.px > 0 && !before.Before(p.sent.Add(p.px)))):
			*st = keyState{}
			return foundInFlight, nil
		}
		return 0, fmt.Errorf("%s: GET missed; the last acknowledged write left %s version %s (deadline window %v..%v); in flight: %v",
			key, clip(st.value), st.version, st.lo, st.hi, p)
	}
	if ackPresent && got == bulk(st.value) && r.ts == st.version {
		return foundAcked, nil
	}
	if p != nil && !p.del && got == bulk(p.value) && (!st.present || mustHLC(t, r.ts).Compare(mustHLC(t, st.version)) > 0) {
		*st = keyState{present: true, value: p.value, version: r.ts, fence: st.fence}
		if p.px > 0 {
			st.lo, st.hi = p.sent.Add(p.px), p.killed.Add(p.px)
		}
		if p.fence != "" {
			st.fence = p.fence
		}
		return foundInFlight, nil
	}
	return 0, fmt.Errorf("%s: GET %s __ts=%q; the last acknowledged write left present=%v %s version %s (deadline window %v..%v); in flight: %v",
		key, clip(got), r.ts, st.present, clip(st.value), st.version, st.lo, st.hi, p)
}

func (m *crashModel) mustSee(t *testing.T, ts string) {
	t.Helper()
	if err := m.see(ts); err != nil {
		t.Fatal(err)
	}
}

// framesValue is id followed by whole valid frames copied from the data
// directory's journal segments and snapshots as they are now, over and
// over, up to size bytes (frames that would pass it are left out).
func framesValue(dir, id string, size int) (string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return "", err
	}
	snaps, err := filepath.Glob(filepath.Join(dir, "*.snap"))
	if err != nil {
		return "", err
	}
	var frames [][]byte
	for _, path := range append(paths, snaps...) {
		f, err := store.FileFrames(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // a snapshot may replace it meanwhile
			return "", err
		}
		frames = append(frames, f...)
	}
	v := []byte(id)
	for added := true; added; {
		added = false
		for _, f := range frames {
			if len(v)+len(f) <= size {
				v, added = append(v, f...), true
			}
		}
	}
	return string(v), nil
}
