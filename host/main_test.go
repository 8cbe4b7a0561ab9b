package host

import (
	"os"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// Every goroutine a host, its rules, clients and brokers started is gone
// once the tests closed them.
func TestMain(m *testing.M) {
	if os.Getenv(timerHelperEnv) != "" { // the timer helper host (timer_kill_test.go)
		timerHelperHost()
		return
	}
	if os.Getenv(groupHelperEnv) != "" { // the group helper host (groupproc_test.go)
		groupHelperHost()
		return
	}
	testutil.Main(m, closeGuests, e2eDir.Remove)
}
