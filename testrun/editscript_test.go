package testrun

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// lcsLen is the textbook O(nm) longest common subsequence length.
func lcsLen(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

// checkScript fails unless script turns a into b, each element of a and b
// visited once, in order, and returns how many elements it keeps.
func checkScript(t *testing.T, a, b []string, script []editOp) int {
	t.Helper()
	i, j, kept := 0, 0, 0
	for _, e := range script {
		if e.i != i || e.j != j {
			t.Fatalf("step %c at (%d, %d), want (%d, %d) (lengths %d, %d)", e.kind, e.i, e.j, i, j, len(a), len(b))
		}
		switch e.kind {
		case '=':
			if a[i] != b[j] {
				t.Fatalf("keeps %q as %q", a[i], b[j])
			}
			i, j, kept = i+1, j+1, kept+1
		case '-':
			i++
		case '+':
			j++
		}
	}
	if i != len(a) || j != len(b) {
		t.Fatalf("ends at (%d, %d), want (%d, %d)", i, j, len(a), len(b))
	}
	return kept
}

// editScript is a shortest edit script: it keeps a longest common
// subsequence, whatever the sequences.
func TestEditScriptIsShortest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seq := func() []string {
		s := make([]string, rng.IntN(12))
		for i := range s {
			s[i] = strconv.Itoa(rng.IntN(4))
		}
		return s
	}
	for range 5000 {
		a, b := seq(), seq()
		if got, want := checkScript(t, a, b, editScript(a, b)), lcsLen(a, b); got != want {
			t.Fatalf("%v / %v: keeps %d, want %d", a, b, got, want)
		}
	}
}

// Sequences too different to align whole still get a valid script, whose
// start is aligned.
func TestEditScriptBeyondTheBound(t *testing.T) {
	a, b := make([]string, 3*maxEditCost), make([]string, 3*maxEditCost)
	for i := range a {
		a[i], b[i] = "a"+strconv.Itoa(i), "b"+strconv.Itoa(i)
	}
	b = append([]string{"x"}, append(a[:10:10], b...)...) // one insertion, then all different
	script := editScript(a, b)
	checkScript(t, a, b, script)
	if script[0].kind != '+' || script[1].kind != '=' {
		t.Fatalf("the start is not aligned: %v", script[:3])
	}
}
