//go:build wasip1

// Command door-alarm-go is the door-open-too-long alarm (examples/door-alarm)
// as a Go WebAssembly module, built with the guest SDK abi/guest/go:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rules/door.wasm ./examples/door-alarm-go
//
// It watches door/front. When the door opens it records door/open_since
// (ssrun.Now(), once per opening) and arms the timer "door-open" for
// door/open_alarm_ms (default 5 minutes) after that moment; when the timer
// fires it writes door/alarm = {"since": ms, "late": bool}. Any other state
// of the door cancels the timer and deletes door/open_since and door/alarm.
// The timer is kept in the state store by the host, so a restart (even
// kill -9) while the door is open still raises the alarm, late if the
// deadline passed while ssrun was down.
//
// The file builds only for wasip1: its init declares the watch, which needs
// the host.
package main

import (
	"encoding/json"
	"strconv"
	"time"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// Keys and the timer of the alarm.
const (
	doorKey   = "door/front"
	limitKey  = "door/open_alarm_ms"
	sinceKey  = "door/open_since"
	alarmKey  = "door/alarm"
	timerName = "door-open"
)

// defaultLimit is how long the door may stay open without door/open_alarm_ms.
const defaultLimit = 5 * time.Minute

// Alarm is the value of door/alarm.
type Alarm struct {
	Since int64 `json:"since"` // when the door opened, Unix ms
	Late  bool  `json:"late"`  // raised after its deadline (host down or busy)
}

func init() {
	if err := ssrun.Watch(doorKey); err != nil {
		panic(err) // fails the load, with the host's message
	}
	ssrun.Handle(handle)
}

func main() {}

func handle(ev ssrun.Event) error {
	switch {
	case ev.Op == ssrun.OpTimer && ev.Key == timerName:
		since, _ := strconv.ParseInt(string(ev.Value), 10, 64)
		if ev.Late {
			_ = ssrun.Log(ssrun.LevelWarn, "door open too long; the alarm is late (ssrun was down or busy)")
		}
		v, err := json.Marshal(Alarm{Since: since, Late: ev.Late})
		if err != nil {
			return err
		}
		_, err = ssrun.Set(alarmKey, v)
		return err
	case ev.Key == doorKey && ev.Op == ssrun.OpSet && string(ev.Value) == "open":
		return opened()
	case ev.Key == doorKey:
		return closed()
	}
	return nil
}

// opened arms the alarm for the moment the door opened: once per opening,
// so a sensor that repeats "open" re-arms the same deadline.
func opened() error {
	since, recorded, err := number(sinceKey)
	if err != nil {
		return err
	}
	if !recorded {
		since = ssrun.Now()
		if _, err := ssrun.Set(sinceKey, []byte(strconv.FormatInt(since, 10))); err != nil {
			return err
		}
	}
	limit := defaultLimit
	if ms, set, err := number(limitKey); err != nil {
		return err
	} else if set {
		limit = time.Duration(ms) * time.Millisecond
	}
	left := max(0, time.UnixMilli(since).Add(limit).Sub(time.UnixMilli(ssrun.Now())))
	return ssrun.Timer(timerName, left, ssrun.TimerOptions{Payload: []byte(strconv.FormatInt(since, 10))})
}

// closed disarms the alarm and clears it.
func closed() error {
	if err := absentOK(ssrun.Cancel(timerName)); err != nil {
		return err
	}
	if err := absentOK(ssrun.Del(sinceKey)); err != nil {
		return err
	}
	return absentOK(ssrun.Del(alarmKey))
}

// number reads key as a decimal integer; ok is false when the key is
// absent or not a number.
func number(key string) (n int64, ok bool, err error) {
	v, err := ssrun.Get(key)
	if ssrun.StatusOf(err) == ssrun.StatusNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, perr := strconv.ParseInt(string(v.Data), 10, 64)
	return n, perr == nil, nil
}

// absentOK treats NOT_FOUND (nothing to cancel or delete) as success.
func absentOK(err error) error {
	if ssrun.StatusOf(err) == ssrun.StatusNotFound {
		return nil
	}
	return err
}
