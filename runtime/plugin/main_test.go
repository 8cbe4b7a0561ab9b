package plugin

import (
	"os"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" { // the helper host (lifecycle_test.go)
		helperHost()
		return
	}
	testutil.Main(m, testDir.Remove)
}
