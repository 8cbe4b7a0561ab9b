package main

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "unsafe" // go:linkname

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// The commands of the SDK's own tests: each checks in the guest and
// reports "report <command> ok", or "report <command> FAIL: <what>".

// reportCheck reports the outcome of the check named name.
func reportCheck(name string, err error) {
	msg := "ok"
	if err != nil {
		msg = "FAIL: " + err.Error()
	}
	ssrun.Log(ssrun.LevelInfo, "report "+name+" "+msg)
}

// ownMemory: results of consecutive calls (get's value and version, set's
// versions, lock's tokens; small ones carved from shared blocks, large
// ones not) never alias: each keeps its bytes while later calls return
// theirs, and appending to a value never reaches another result. The
// keys own/small, own/big hold the values given by the test.
func ownMemory() error {
	type kept struct {
		v    ssrun.Value
		want string
	}
	var all []kept
	var versions []string
	for i := range 200 { // enough to cross several blocks
		key := "own/" + strconv.Itoa(i%3)
		want := strings.Repeat(strconv.Itoa(i), 1+i%40)
		ver, err := ssrun.Set(key, []byte(want))
		if err != nil {
			return err
		}
		versions = append(versions, ver)
		v, err := ssrun.Get(key)
		if err != nil {
			return err
		}
		if v.Version != ver {
			return fmt.Errorf("get %s: version %q, set returned %q", key, v.Version, ver)
		}
		all = append(all, kept{v, want})
		// Appending to a result must copy, not write into the block.
		if cap(v.Data) != len(v.Data) {
			return fmt.Errorf("get %s: value of length %d has capacity %d", key, len(v.Data), cap(v.Data))
		}
		_ = append(v.Data, "XXXXXXXXXXXXXXXX"...)
	}
	big, err := ssrun.Get("own/big")
	if err != nil {
		return err
	}
	bigCopy := bytes.Clone(big.Data)
	tok1, err := ssrun.Lock("own/lock1", time.Minute)
	if err != nil {
		return err
	}
	tok2, err := ssrun.Lock("own/lock2", time.Minute)
	if err != nil {
		return err
	}
	if _, err := ssrun.Get("own/small"); err != nil { // a later result
		return err
	}
	for i, k := range all {
		if string(k.v.Data) != k.want || k.v.Version != versions[i] {
			return fmt.Errorf("result %d: value %q version %q, want %q %q", i, k.v.Data, k.v.Version, k.want, versions[i])
		}
	}
	for i := 1; i < len(versions); i++ {
		if versions[i] == versions[i-1] {
			return fmt.Errorf("sets %d and %d returned one version %q", i-1, i, versions[i])
		}
	}
	if tok1 == tok2 || tok1 == "" || tok2 == "" {
		return fmt.Errorf("tokens %q and %q", tok1, tok2)
	}
	if !bytes.Equal(big.Data, bigCopy) || len(big.Data) <= 128 {
		return fmt.Errorf("large value of %d bytes changed", len(big.Data))
	}
	return nil
}

// errorReuse: a routine failure that repeats the last one (same verb, key
// and status) returns the same error value; StatusOf, errors.As and
// errors.Is keep working, its text is the host's; a different key, verb
// or status gets an error of its own.
func errorReuse() error {
	e1 := ssrun.Del("reuse/absent")
	e2 := ssrun.Del("reuse/absent")
	if e1 == nil || e1 != e2 {
		return fmt.Errorf("two failures of del reuse/absent: %p and %p, want one error", e1, e2)
	}
	if want := `del "reuse/absent": not found`; e2.Error() != want { // asked after the second failure: the host's text
		return fmt.Errorf("text %q, want %q", e2.Error(), want)
	}
	var e *ssrun.Error
	if !errors.As(e2, &e) || e.Status != ssrun.StatusNotFound || ssrun.StatusOf(e2) != ssrun.StatusNotFound || !errors.Is(e2, e1) {
		return fmt.Errorf("reused error: As %v %+v, StatusOf %s", errors.As(e2, &e), e, ssrun.StatusOf(e2))
	}
	wrapped := fmt.Errorf("ctx: %w", e2)
	if ssrun.StatusOf(wrapped) != ssrun.StatusNotFound {
		return fmt.Errorf("wrapped: StatusOf %s", ssrun.StatusOf(wrapped))
	}
	if e3 := ssrun.Del("reuse/absent2"); e3 == e1 || e3.Error() != `del "reuse/absent2": not found` {
		return fmt.Errorf("other key: %p %q (first %p)", e3, e3, e1)
	}
	if e4 := ssrun.Unwatch("reuse/absent2"); e4 == nil || ssrun.StatusOf(e4) != ssrun.StatusNotFound || e4.Error() != `unwatch "reuse/absent2": not watched` {
		return fmt.Errorf("other verb: %v", e4)
	}
	n1 := ssrun.VDel("reuse/k", []byte("other"))
	n2 := ssrun.VDel("reuse/k", []byte("other"))
	if n1 != n2 || ssrun.StatusOf(n2) != ssrun.StatusNotApplied {
		return fmt.Errorf("two failures of vdel reuse/k: %p %v and %p %v, want one NOT_APPLIED error", n1, n1, n2, n2)
	}
	if ssrun.Del("reuse/k") != nil {
		return errors.New("del reuse/k failed")
	}
	if n3 := ssrun.VDel("reuse/k", []byte("other")); n3 == n1 || ssrun.StatusOf(n3) != ssrun.StatusNotFound {
		return fmt.Errorf("vdel of a deleted key: %p %v, want a NOT_FOUND error of its own", n3, n3)
	}
	return nil
}

// yieldInVerb is the SDK's test hook: called inside a verb, with its guard
// held, before the verb fetches a long result with `result`.
//
//go:linkname yieldInVerb github.com/ssrun/ssrun/abi/guest/go.yieldInVerb
var yieldInVerb func()

// concurrently calls the verbs from several goroutines at once, each on
// keys of its own, values small and longer than a result block (fetched
// with `result`: the goroutine yields inside the verb there, through
// yieldInVerb, and the others try verbs meanwhile), yielding between
// calls too, and checks every result.
func concurrently() error {
	const goroutines, rounds = 8, 60
	yieldInVerb = runtime.Gosched // inside the guard: the others find it held
	defer func() { yieldInVerb = nil }()
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			errs[g] = concurrentRounds(g, rounds)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func concurrentRounds(g, rounds int) error {
	key := "conc/" + strconv.Itoa(g)
	absent := "conc/absent/" + strconv.Itoa(g)
	for i := range rounds {
		want := []byte(strconv.Itoa(g) + ":" + strconv.Itoa(i))
		if i%4 == 3 {
			want = bytes.Repeat(want, 2<<10/len(want)+1) // longer than a block
		}
		ver, err := ssrun.Set(key, want)
		if err != nil {
			return fmt.Errorf("goroutine %d: set: %w", g, err)
		}
		runtime.Gosched()
		v, err := ssrun.Get(key)
		if err != nil {
			return fmt.Errorf("goroutine %d: get: %w", g, err)
		}
		if !bytes.Equal(v.Data, want) || v.Version != ver {
			return fmt.Errorf("goroutine %d round %d: got %d bytes version %q, want %d bytes version %q", g, i, len(v.Data), v.Version, len(want), ver)
		}
		err = ssrun.Del(absent)
		if ssrun.StatusOf(err) != ssrun.StatusNotFound || err.Error() != "del "+strconv.Quote(absent)+": not found" &&
			err.Error() != "del "+strconv.Quote(absent)+": NOT_FOUND" {
			return fmt.Errorf("goroutine %d: del %s: %v", g, absent, err)
		}
		if tok, err := ssrun.Lock(key+"/lock", time.Minute); err != nil || tok == "" {
			return fmt.Errorf("goroutine %d: lock: %q %v", g, tok, err)
		}
	}
	return nil
}
