// The tests of deploy/ check what deploy/README.md promises about the
// Dockerfile and the Kubernetes manifest, without Docker or a cluster: the
// Dockerfile's build line is run as written and its result inspected, and
// the manifest is parsed and checked field by field against the flags and
// variables the built ssrun binary actually has.
package deploy_test

import (
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m, removeImageBinary) }
