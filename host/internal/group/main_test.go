package group

import (
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }
