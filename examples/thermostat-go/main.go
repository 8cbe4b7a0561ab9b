//go:build wasip1

// Command thermostat-go is the thermostat rule as a Go WebAssembly module,
// built with the guest SDK abi/guest/go (see README.md):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o examples/thermostat-go/rules/thermostat.wasm ./examples/thermostat-go
//
// It watches thermostat1/setPoint. A set point that is a decimal number
// (surrounding ASCII whitespace allowed) is clamped into [16, 28]; the
// result is written to hvac1/target in its shortest form ("28", "21.5")
// and, when clamping changed the number, back to thermostat1/setPoint, and
// thermostat1/error is deleted. Any other value leaves hvac1/target alone
// and sets thermostat1/error to `invalid set point "<value>"`. When the set
// point is deleted, hvac1/target is deleted (HVAC off).
//
// The file builds only for wasip1: its init declares the watch, which needs
// the host.
package main

import (
	"errors"
	"strconv"
	"strings"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// Keys of the thermostat.
const (
	setPointKey = "thermostat1/setPoint"
	targetKey   = "hvac1/target"
	errorKey    = "thermostat1/error"
)

// Bounds of the set point.
const (
	low  = 16.0
	high = 28.0
)

func init() {
	if err := ssrun.Watch(setPointKey); err != nil {
		panic(err) // fails the load, with the host's message
	}
	ssrun.Handle(handle)
}

func main() {}

func handle(ev ssrun.Event) error {
	if ev.Key != setPointKey {
		return nil
	}
	switch ev.Op {
	case ssrun.OpDelete:
		return absentOK(ssrun.Del(targetKey)) // HVAC off
	case ssrun.OpSet:
	default:
		return nil
	}
	v, ok := number(ev.Value)
	if !ok {
		_, err := ssrun.Set(errorKey, []byte(`invalid set point "`+string(ev.Value)+`"`))
		return err
	}
	clamped := min(max(v, low), high)
	text := []byte(strconv.FormatFloat(clamped, 'g', -1, 64))
	if _, err := ssrun.Set(targetKey, text); err != nil {
		return err
	}
	if clamped != v {
		if _, err := ssrun.Set(setPointKey, text); err != nil {
			return err
		}
	}
	return absentOK(ssrun.Del(errorKey))
}

// absentOK treats NOT_FOUND (nothing to delete) as success.
func absentOK(err error) error {
	if ssrun.StatusOf(err) == ssrun.StatusNotFound {
		return nil
	}
	return err
}

// number reads a decimal number, surrounded by ASCII whitespace or not:
// [+-] digits [. digits] [(e|E) [+-] digits] with at least one mantissa
// digit, rounded to the nearest float64. Out of float64's range it is ±Inf
// (clamped like any other number); hexadecimal, Inf, NaN and underscores
// are not numbers here.
func number(b []byte) (float64, bool) {
	s := strings.Trim(string(b), " \t\n\v\f\r")
	if !isDecimal(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return v, true
}

func isDecimal(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	n := digits()
	if i < len(s) && s[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
