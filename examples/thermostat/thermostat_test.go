package thermostat_test

import (
	"testing"

	"github.com/ssrun/ssrun/examples/internal/thermotest"
	"github.com/ssrun/ssrun/runtime/lua"
)

// The Lua thermostat passes the table every thermostat example passes.
func TestThermostat(t *testing.T) {
	thermotest.Run(t, ".", lua.New(lua.Config{}))
}
