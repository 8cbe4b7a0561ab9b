package dooralarm_test

import (
	"context"
	"testing"

	"github.com/ssrun/ssrun/examples/internal/doortest"
	"github.com/ssrun/ssrun/runtime/lua"
)

// TestDoorAlarm plays the shared door-alarm scenario (examples/internal/
// doortest: restarts of the host before and past a pending deadline,
// cancel, repeated opens) on door.lua through the real host on the
// embedded broker.
func TestDoorAlarm(t *testing.T) {
	rt := lua.New(lua.Config{})
	t.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the hosts' cleanups
	doortest.Run(t, ".", rt)
}
