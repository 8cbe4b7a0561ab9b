package plugin

import (
	"context"
	_ "embed"
	"slices"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// The plugin proto of revision 2 (timers, before key families), compiled
// to a descriptor set as the revision-1 one (revision_test.go):
//
//	git show 3833770:runtime/plugin/proto/ssrun/plugin/v1/plugin.proto > R2/ssrun/plugin/v1/plugin.proto
//	protoc -I R2 --descriptor_set_out=testdata/plugin-revision2.binpb ssrun/plugin/v1/plugin.proto
//
//go:embed testdata/plugin-revision2.binpb
var rev2DescriptorSet []byte

// TestRevision2Plugin: a plugin speaking the revision-2 proto, which has
// no Keys, WatchPattern or UnwatchPattern, starts on this host, calls the
// verbs it knows and handles events as before.
func TestRevision2Plugin(t *testing.T) {
	fd := protoFile(t, rev2DescriptorSet)
	if fd.Messages().ByName("TimerRequest") == nil || fd.Messages().ByName("KeysRequest") != nil ||
		fd.Services().ByName("Host").Methods().ByName("Keys") != nil {
		t.Fatal("the revision-2 descriptor is not the proto of revision 2")
	}
	h := abitest.New()
	s, _, _ := inProcessScriptOf(t, func() inProcessRule { return &rev1Rule{fd: fd} }, h, abi.Limits{})
	if _, ok := h.Watches()["w"]; !ok {
		t.Fatalf("init did not watch w: %v", h.Watches())
	}
	if err := s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Value("copy/k"); string(got) != "v" {
		t.Errorf("copy/k = %q, want v", got)
	}
	if want := (abitest.LogLine{Level: abi.LevelInfo, Msg: "rev1 event op=1 key=k value=v unknown=0"}); !slices.Contains(h.Logs(), want) {
		t.Errorf("log line %q missing: %v", want.Msg, h.Logs())
	}
}
