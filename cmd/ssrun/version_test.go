package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := runCLI(t, "", args...)
		if r.code != 0 || r.stdout != "ssrun "+version()+"\n" || !strings.Contains(r.stdout, "go1.") {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "da0f9d2"}, {Key: "vcs.time", Value: "2026-11-20T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionOf(bi), "v1.2.3, revision da0f9d2, committed 2026-11-20T10:00:00Z, with uncommitted changes, go1.26.8"; got != want {
		t.Fatalf("versionOf = %q, want %q", got, want)
	}
}
