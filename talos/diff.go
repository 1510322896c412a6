package talos

import (
	"fmt"
	"strings"
)

// diffContext is how many unchanged lines surround each change, as diff -u.
const diffContext = 3

// UnifiedDiff returns the unified diff (diff -u) of two texts; "" when they are
// equal. Written here rather than taken from a library because none is in the
// module graph and machine configs are small (an O(n·m) longest common
// subsequence over a few hundred lines is cheap).
func UnifiedDiff(fromName, toName, a, b string) string {
	if a == b {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	ops := diffLines(x, y)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromName, toName)
	// Group ops into hunks: runs of changes with at most 2*diffContext equal lines between.
	i := 0
	for i < len(ops) {
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(i-diffContext, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = run
		}
		writeHunk(&sb, ops[start:end])
		i = end
	}
	return sb.String()
}

type diffOp struct {
	kind byte // ' ', '-', '+'
	text string
	// ax, by are the 1-based line numbers in a and b before this op.
	ax, by int
}

func writeHunk(sb *strings.Builder, ops []diffOp) {
	var na, nb int
	for _, o := range ops {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	sa, sb2 := ops[0].ax, ops[0].by
	if na == 0 {
		sa--
	}
	if nb == 0 {
		sb2--
	}
	fmt.Fprintf(sb, "@@ -%d,%d +%d,%d @@\n", sa, na, sb2, nb)
	for _, o := range ops {
		sb.WriteByte(o.kind)
		sb.WriteString(o.text)
		sb.WriteByte('\n')
	}
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLines is a longest-common-subsequence line diff.
func diffLines(a, b []string) []diffOp {
	n, m := len(a), len(b)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i], i + 1, j + 1})
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, diffOp{'-', a[i], i + 1, j + 1})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j], i + 1, j + 1})
			j++
		}
	}
	return ops
}
