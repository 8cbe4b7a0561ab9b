package host

import (
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// Every goroutine a host, its rules, clients and brokers started is gone
// once the tests closed them.
func TestMain(m *testing.M) { testutil.Main(m, closeGuests, e2eDir.Remove) }
