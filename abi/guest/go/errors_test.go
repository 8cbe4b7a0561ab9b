package ssrun

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// fail makes the error of a failed verb as the verbs do.
func fail(verb, key string, st Status) error {
	enter()
	defer leave()
	return newFailure(verb, key, st)
}

// TestVerbError: a failed verb's error gives its status to StatusOf,
// errors.As and the event's failure code, directly and wrapped; with no
// host message to fetch (here: not built for wasip1) its text names the
// verb, key and status; errors handed out from one chunk stay distinct.
func TestVerbError(t *testing.T) {
	var errs []error
	for i := range 2*errChunk + 1 {
		st := []Status{StatusNotFound, StatusNotApplied, StatusDenied}[i%3]
		errs = append(errs, fail("del", fmt.Sprint("k", i), st))
	}
	for i, err := range errs {
		st := []Status{StatusNotFound, StatusNotApplied, StatusDenied}[i%3]
		want := fmt.Sprintf(`del "k%d": %s`, i, st)
		if err.Error() != want {
			t.Errorf("error %d: %q, want %q", i, err.Error(), want)
		}
		wrapped := fmt.Errorf("ctx: %w", err)
		if StatusOf(err) != st || StatusOf(wrapped) != st || abi.StatusOf(wrapped) != st {
			t.Errorf("error %d: StatusOf %s, wrapped %s, abi.StatusOf wrapped %s; want %s", i, StatusOf(err), StatusOf(wrapped), abi.StatusOf(wrapped), st)
		}
		if rc := failureCode(wrapped); rc != int32(st) {
			t.Errorf("error %d: failure code %d, want %d", i, rc, st)
		}
		var e1, e2 *Error
		if !errors.As(wrapped, &e1) || !errors.As(err, &e2) {
			t.Fatalf("error %d: errors.As finds no *Error", i)
		}
		if e1 != e2 || e1.Status != st || e1.Msg != want {
			t.Errorf("error %d: As gives %p %+v and %p; want one *Error {%s %q}", i, e1, e1, e2, st, want)
		}
	}
	var target *abi.Error
	if errors.As(errors.New("plain"), &target) || failureCode(errors.New("plain")) != -1 || StatusOf(errors.New("plain")) != StatusInternal {
		t.Error("a plain error is taken for an ABI error")
	}
}
