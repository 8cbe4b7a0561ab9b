package thermostat_test

import (
	"testing"

	"github.com/ssrun/ssrun/examples/internal/thermotest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/runtime/lua"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// The Lua thermostat passes the table every thermostat example passes.
func TestThermostat(t *testing.T) {
	thermotest.Run(t, ".", lua.New(lua.Config{}))
}
