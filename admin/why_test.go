package admin_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host/provenance"
)

func TestWhyDocument(t *testing.T) {
	w := provenance.Write{Key: "siren/garden", Rule: "alarm.lua", Op: "SET", Value: "on", ValueSize: 2, Version: "v2",
		At:     time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC),
		Event:  provenance.Cause{Key: "alarm/state", Op: "SET", Version: "v1", Rule: "door.lua"},
		Chain:  []provenance.Step{{Rule: "door.lua", Key: "alarm/state", Op: "SET", Version: "v1"}, {Rule: "alarm.lua", Key: "siren/garden", Op: "SET", Version: "v2"}},
		Origin: &provenance.Origin{Key: "door/front", Op: "SET", Version: "v0", Client: "sensor-1"}}
	src := fakeHost{writes: map[string]provenance.Write{"siren/garden": w, "a b&c": {Key: "a b&c", Rule: "x.lua"}}}

	var got provenance.Write
	if code := get(t, admin.WhyHandler(src), "/why?key=siren%2Fgarden", &got); code != http.StatusOK || !reflect.DeepEqual(got, w) {
		t.Fatalf("%d %+v, want %+v", code, got, w)
	}
	var doc map[string]any
	get(t, admin.WhyHandler(src), "/why?key=siren/garden", &doc)
	if o := doc["origin"].(map[string]any); o["client"] != "sensor-1" || o["key"] != "door/front" || doc["value_size"] != 2.0 {
		t.Errorf("JSON names: %v", doc)
	}
	if code := get(t, admin.WhyHandler(src), "/why?key=a+b%26c", &got); code != http.StatusOK || got.Rule != "x.lua" {
		t.Errorf("an escaped key: %d %+v", code, got)
	}

	var e admin.ErrorDoc
	if code := get(t, admin.WhyHandler(src), "/why?key=nobody/wrote", &e); code != http.StatusNotFound || !strings.Contains(e.Error, `"nobody/wrote"`) {
		t.Errorf("unknown key: %d %q", code, e.Error)
	}
	if code := get(t, admin.WhyHandler(src), "/why", &e); code != http.StatusBadRequest || !strings.Contains(e.Error, "key") {
		t.Errorf("no key: %d %q", code, e.Error)
	}
}
