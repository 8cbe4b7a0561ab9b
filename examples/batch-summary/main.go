// Command batch-summary is an ssrun native plugin rule. It watches the
// sensors sensor/1, sensor/2 and sensor/3 and keeps the key summary/sensors
// up to date with a JSON summary of their latest numeric values:
//
//	{"count":3,"max":30,"mean":20,"min":10,"values":{"sensor/1":10,"sensor/2":20,"sensor/3":30},"version":"dev"}
//
// A value that is not a number counts as absent (and is logged); a deleted
// sensor leaves the summary. The summary is written only when it changes.
//
// The plugin keeps the latest values in memory but rebuilds them from the
// store in Init, which runs at every process start: after a crash, a kill
// or a handler timeout the runtime restarts the plugin and the summary
// catches up. Keep state in the store, not only in memory.
//
// Build it into a rules folder and run it (see README.md):
//
//	go build -o rules/batch-summary ./examples/batch-summary
//	ssrun dev rules/
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

// The watched sensors and the summary key.
var sensors = []string{"sensor/1", "sensor/2", "sensor/3"}

const summaryKey = "summary/sensors"

// version is reported in the summary; set it at build time with
// -ldflags "-X main.version=...".
var version = "dev"

func main() {
	r := &rule{values: map[string]float64{}}
	sdk.Serve(sdk.Rule{Init: r.init, Handle: r.handle})
}

// rule is the plugin's state: the latest numeric value of each sensor and
// the summary last written.
type rule struct {
	values  map[string]float64
	written []byte
}

// summary is the JSON document written to summaryKey.
type summary struct {
	Count   int                `json:"count"`
	Max     *float64           `json:"max,omitempty"`
	Mean    *float64           `json:"mean,omitempty"`
	Min     *float64           `json:"min,omitempty"`
	Values  map[string]float64 `json:"values"`
	Version string             `json:"version"`
}

// init watches the sensors and rebuilds the state from the store.
func (r *rule) init(ctx context.Context, h sdk.Host) error {
	for _, key := range sensors {
		if err := h.Watch(ctx, key, abi.WatchOptions{}); err != nil {
			return err
		}
		v, err := h.Get(ctx, key)
		switch {
		case err == nil:
			r.update(h, key, v.Data)
		case abi.StatusOf(err) != abi.StatusNotFound:
			return fmt.Errorf("read %s: %w", key, err)
		}
	}
	return r.write(ctx, h)
}

func (r *rule) handle(ctx context.Context, h sdk.Host, ev abi.Event) error {
	switch ev.Op {
	case abi.OpSet:
		r.update(h, ev.Key, ev.Value)
	case abi.OpDelete:
		delete(r.values, ev.Key)
	default:
		return nil
	}
	return r.write(ctx, h)
}

// update records the value of a sensor; a value that is not a number
// removes the sensor from the summary.
func (r *rule) update(h sdk.Host, key string, value []byte) {
	f, err := strconv.ParseFloat(strings.TrimSpace(string(value)), 64)
	if err != nil {
		delete(r.values, key)
		h.Log(abi.LevelWarn, fmt.Sprintf("%s: %q is not a number; left out of the summary", key, value))
		return
	}
	r.values[key] = f
}

// write stores the summary if it changed since the last write.
func (r *rule) write(ctx context.Context, h sdk.Host) error {
	s := summary{Count: len(r.values), Values: r.values, Version: version}
	if s.Count > 0 {
		first := true
		var lo, hi, sum float64
		for _, key := range sensors { // a fixed order makes the float sum deterministic
			v, ok := r.values[key]
			if !ok {
				continue
			}
			if first || v < lo {
				lo = v
			}
			if first || v > hi {
				hi = v
			}
			sum += v
			first = false
		}
		mean := sum / float64(s.Count)
		s.Min, s.Max, s.Mean = &lo, &hi, &mean
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if bytes.Equal(b, r.written) {
		return nil
	}
	if _, err := h.Set(ctx, summaryKey, b, abi.SetOptions{}); err != nil {
		return err
	}
	r.written = b
	return nil
}
