package main

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// allocs runs the bench row verb n times and reports how many heap
// allocations the guest made meanwhile: "report allocs verb=<verb> n=<n>
// mallocs=<count>". An allocation costs a Go guest about as much as
// several host calls, so the SDK's budget per verb is counted here.
func allocs(verb string, n int) {
	bench(verb, 1) // first use: lazy initialisation is not the verb's cost
	mallocs := func(n int) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		bench(verb, n)
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	base := mallocs(0) // the loop's own
	ssrun.Log(ssrun.LevelInfo, "report allocs verb="+verb+" n="+strconv.Itoa(n)+" mallocs="+strconv.FormatUint(mallocs(n)-base, 10))
}

// errText reports the text and status of verb errors kept while other
// calls fail, one line each: "report errtext <name> status=<StatusOf>
// as=<Status through errors.As> msg=<Error()>". errtext/k must hold a value
// other than "other".
func errText() {
	keptNotFound := ssrun.Del("errtext/absent1")           // NOT_FOUND; its text is not asked for yet
	notFound := ssrun.Del("errtext/absent2")               // NOT_FOUND, asked for at once
	report("not-found", notFound)                          // the host's text
	invalid := ssrun.Timer("errtext/t", -time.Hour)        // INVALID: the host's text is kept at once
	notApplied := ssrun.VDel("errtext/k", []byte("other")) // NOT_APPLIED, asked for at once
	report("not-applied", notApplied)
	_, last := ssrun.Lock("errtext/l", -time.Second) // INVALID, the last failure
	report("kept-not-found", keptNotFound)           // later calls failed: verb, key and status
	report("kept-invalid", invalid)
	report("kept-not-applied", notApplied) // its text was asked for before: kept
	report("last", last)
	report("wrapped", fmt.Errorf("ctx: %w", notFound))
}

func report(name string, err error) {
	var e *ssrun.Error
	as := "none"
	if errors.As(err, &e) {
		as = e.Status.String()
		if e.Msg != err.Error() && name != "wrapped" {
			as += "(message differs)"
		}
	}
	ssrun.Log(ssrun.LevelInfo, "report errtext "+name+" status="+ssrun.StatusOf(err).String()+" as="+as+" msg="+strconv.Quote(err.Error()))
}
