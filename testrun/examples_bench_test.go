package testrun_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// BenchmarkExamples runs the Lua examples' test files, as ssrun test does.
func BenchmarkExamples(b *testing.B) {
	files, err := filepath.Glob("../examples/*/*.test.yaml")
	if err != nil || len(files) == 0 {
		b.Fatalf("examples: %v %v", files, err)
	}
	rt := lua.New(lua.Config{Rand: testrun.Rand})
	defer rt.Close(context.Background())
	for b.Loop() {
		failed, err := testrun.Run(context.Background(), files, testrun.Options{Runtimes: []abi.Runtime{rt}, Report: &testrun.Reporter{Out: io.Discard}})
		if failed != 0 || err != nil {
			b.Fatalf("failed %d, %v", failed, err)
		}
	}
}
