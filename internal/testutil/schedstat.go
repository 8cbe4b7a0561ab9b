package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUTime returns how long the threads of process pid have run on a CPU
// (the first field of each /proc/<pid>/task/*/schedstat); 0 where there is
// no such file (not Linux, or the process ended).
func CPUTime(pid int) time.Duration { return time.Duration(schedstatSum(pid, 0)) }

// ContextSwitches returns how often the threads of process pid ran (the
// third field of each /proc/<pid>/task/*/schedstat: one more than its
// context switches per thread); 0 where there is no such file.
func ContextSwitches(pid int) int64 { return schedstatSum(pid, 2) }

// schedstatSum sums field k of /proc/<pid>/task/*/schedstat over the
// threads of process pid.
func schedstatSum(pid, k int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		if fs := strings.Fields(string(b)); len(fs) == 3 {
			if n, err := strconv.ParseInt(fs[k], 10, 64); err == nil {
				sum += n
			}
		}
	}
	return sum
}
