package testrun

import (
	"cmp"
	"slices"
)

// editOp is one step of an edit script from a to b: keep a[i] (= b[j]),
// delete a[i], or insert b[j].
type editOp struct {
	kind byte // '=', '-' or '+'
	i, j int  // indexes in a and b where the step is
}

// maxEditCost bounds the work of editScript: a shortest edit script with
// up to this many deletions and insertions is found exactly (Myers' O(ND)
// algorithm, in O(D²) memory: 16 MiB at the bound); beyond it, only the
// first alignWindow elements after the common prefix are aligned, and the
// rest is one deletion and insertion block.
const (
	maxEditCost = 2048
	alignWindow = maxEditCost / 2
)

// editScript returns a shortest edit script from a to b (a longest common
// subsequence kept): one element more in b is one insertion, not a change
// of every element after it.
func editScript(a, b []string) []editOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out := make([]editOp, 0, max(len(a), len(b)))
	for k := range pre {
		out = append(out, editOp{'=', k, k})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	mid, ok := myers(ma, mb, maxEditCost)
	if !ok { // too different to align whole: align the start, then give up
		wa, wb := min(len(ma), alignWindow), min(len(mb), alignWindow)
		mid, _ = myers(ma[:wa], mb[:wb], wa+wb)
		for i := wa; i < len(ma); i++ {
			mid = append(mid, editOp{'-', i, wb})
		}
		for j := wb; j < len(mb); j++ {
			mid = append(mid, editOp{'+', len(ma), j})
		}
	}
	for _, e := range mid {
		out = append(out, editOp{e.kind, e.i + pre, e.j + pre})
	}
	for k := range suf {
		out = append(out, editOp{'=', len(a) - suf + k, len(b) - suf + k})
	}
	// Each block of differences lists what goes (-) before what comes (+).
	for i := 0; i < len(out); {
		if out[i].kind == '=' {
			i++
			continue
		}
		j := i
		for j < len(out) && out[j].kind != '=' {
			j++
		}
		x, y := out[i].i, out[i].j // where the block starts: the first step's place
		for _, e := range out[i:j] {
			x, y = min(x, e.i), min(y, e.j)
		}
		slices.SortStableFunc(out[i:j], func(p, q editOp) int { return cmp.Compare(q.kind, p.kind) }) // '-' > '+'
		for k := i; k < j; k++ {
			out[k].i, out[k].j = x, y
			if out[k].kind == '-' {
				x++
			} else {
				y++
			}
		}
		i = j
	}
	return out
}

// myers returns a shortest edit script from a to b when one costs at most
// limit deletions and insertions; ok is false otherwise. Deletions come
// before insertions at each point of difference.
func myers(a, b []string, limit int) (script []editOp, ok bool) {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return nil, true
	}
	off := n + m
	v := make([]int, 2*off+2) // v[off+k]: furthest x on diagonal k
	var trace [][]int         // v before each round d, for the way back
	for d := 0; d <= min(limit, n+m); d++ {
		trace = append(trace, append([]int(nil), v[off-d:off+d+1]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1] // down: an insertion
			} else {
				x = v[off+k-1] + 1 // right: a deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, n, m, d), true
			}
		}
	}
	return nil, false
}

// backtrack walks the rounds of myers back from (n, m), found in round d.
func backtrack(trace [][]int, n, m, d int) []editOp {
	var rev []editOp
	x, y := n, m
	for ; d > 0; d-- {
		prev := trace[d] // v before round d: indexes -d..d shifted by d
		at := func(k int) int { return prev[k+d] }
		k := x - y
		var pk int
		if k == -d || k != d && at(k-1) < at(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, editOp{'=', x, y})
		}
		if pk == k+1 {
			y--
			rev = append(rev, editOp{'+', x, y})
		} else {
			x--
			rev = append(rev, editOp{'-', x, y})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, editOp{'=', x, y})
	}
	out := make([]editOp, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}
