//go:build race

package broker_test

// raceEnabled reports whether the tests run under the race detector, which
// slows the broker about tenfold: soaks shrink (soak_test.go).
const raceEnabled = true
