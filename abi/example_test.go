package abi_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// clamp is a rule's logic written against abi.Host: every runtime calls the
// same verbs, so it can be tried on the in-memory abitest.Host.
func clamp(ctx context.Context, h abi.Host, ev abi.Event) error {
	if ev.Op != abi.OpSet {
		return nil
	}
	v, err := strconv.Atoi(string(ev.Value))
	if err != nil {
		return fmt.Errorf("set point %q: %w", ev.Value, err)
	}
	_, err = h.Set(ctx, "hvac1/target", []byte(strconv.Itoa(min(28, max(16, v)))), abi.SetOptions{})
	return err
}

// A rule's handler run against the in-memory Host: no broker, no runtime.
func Example() {
	ctx := context.Background()
	h := abitest.New()
	version := h.Put("thermostat1/setPoint", []byte("35"))
	err := clamp(ctx, h, abi.Event{Key: "thermostat1/setPoint", Op: abi.OpSet, Value: []byte("35"), Version: version})
	target, _ := h.Value("hvac1/target")
	fmt.Printf("%s %v %d\n", target, err, h.Calls(abi.FnSet))
	// Output: 28 <nil> 1
}

// Every failed call carries a Status, the same in every runtime.
func ExampleStatusOf() {
	ctx := context.Background()
	h := abitest.New()
	_, err := h.Get(ctx, "absent")
	fmt.Println(abi.StatusOf(err))

	if _, err := h.Set(ctx, "k", []byte("v"), abi.SetOptions{Cond: abi.CondNX}); err != nil {
		panic(err)
	}
	_, err = h.Set(ctx, "k", []byte("w"), abi.SetOptions{Cond: abi.CondNX})
	fmt.Println(abi.StatusOf(err))

	h.Fail(abi.FnDel, abi.Errorf(abi.StatusUnavailable, "del %q: store offline", "k"))
	err = h.Del(ctx, "k", abi.DelOptions{})
	var e *abi.Error
	fmt.Println(abi.StatusOf(err), errors.As(err, &e), err)
	// Output:
	// NOT_FOUND
	// NOT_APPLIED
	// UNAVAILABLE true del "k": store offline
}
