package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// runsOf makes one figures per value, each with the ratio key set to it.
func runsOf(vals map[string][]float64) []*figures {
	var n int
	for _, v := range vals {
		n = max(n, len(v))
	}
	out := make([]*figures, n)
	for i := range out {
		out[i] = &figures{Ratios: map[string]float64{}, OpsPerSecond: map[string]float64{}}
		for k, v := range vals {
			out[i].Ratios[k] = v[i]
		}
	}
	return out
}

func TestABVerdict(t *testing.T) {
	base := map[string][]float64{"create/1": {0.12, 0.10, 0.14}, "create/8": {0.10, 0.11, 0.12}, "update/1": {0.13, 0.12, 0.11}}
	for _, tc := range []struct {
		name    string
		current map[string][]float64
		failed  []string
	}{
		{"the same", base, nil},
		{"faster", map[string][]float64{"create/1": {0.2, 0.2, 0.2}, "create/8": {0.2, 0.2, 0.2}, "update/1": {0.2, 0.2, 0.2}}, nil},
		// One disturbed run in three does not move a median.
		{"one run of each disturbed", map[string][]float64{"create/1": {0.02, 0.12, 0.12}, "create/8": {0.11, 0.01, 0.11}, "update/1": {0.12, 0.12, 0.01}}, nil},
		// One level astray while the path holds at the others.
		{"one level a third slower", map[string][]float64{"create/1": {0.08, 0.08, 0.08}, "create/8": {0.11, 0.11, 0.11}, "update/1": {0.12, 0.12, 0.12}}, nil},
		{"creates clearly slower", map[string][]float64{"create/1": {0.05, 0.06, 0.05}, "create/8": {0.05, 0.05, 0.06}, "update/1": {0.12, 0.12, 0.12}}, []string{"create (0.44×)"}},
		{"both paths slower", map[string][]float64{"create/1": {0.06, 0.06, 0.06}, "create/8": {0.06, 0.06, 0.06}, "update/1": {0.03, 0.03, 0.03}}, []string{"create (0.52×)", "update (0.25×)"}},
		{"nothing measured under test", map[string][]float64{"create/1": {0, 0, 0}, "create/8": {0, 0, 0}, "update/1": {0, 0, 0}}, []string{"create (0.00×)", "update (0.00×)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, failed := abVerdict(abRuns{base: runsOf(base), current: runsOf(tc.current)}, 0.75)
			require.Equal(t, tc.failed, failed)
			require.Len(t, rows, 5, "three ratios and two paths")
		})
	}
}

func TestMedianOf(t *testing.T) {
	for _, tc := range []struct {
		vals []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		var runs []*figures
		for _, v := range tc.vals {
			runs = append(runs, &figures{Ratios: map[string]float64{"k": v}})
		}
		got, m := medianOf(runs, func(f *figures) float64 { return f.Ratios["k"] })
		require.Equal(t, tc.want, m)
		require.Len(t, got, len(tc.vals), "each run's value, in run order")
	}
}

// TestABCommandRuns runs the gate with one binary on both sides: it measures
// both in turns, prints the table and passes.
func TestABCommandRuns(t *testing.T) {
	t.Parallel()
	server := buildServer(t)
	out, err := runSelf(t, "--server", server, "ab", "--base", server, "--rounds", "1", "--confirm", "0",
		"--duration", "300ms", "--clients", "2", "--floor", "0.1")
	require.NoError(t, err, out)
	for _, want := range []string{"### round 1, A", "### round 1, B", "| create/2 |", "| update/2 |", "**create (geometric mean over the levels)**", "no ratio's median below 0.10×"} {
		require.Contains(t, out, want)
	}
	out, err = runSelf(t, "--server", server, "ab", "--base", "/nonexistent/rezuscloud")
	require.Error(t, err)
	require.Contains(t, out, "/nonexistent/rezuscloud")
}
