package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompareFigures(t *testing.T) {
	recorded := &figures{Ratios: map[string]float64{"create/64": 0.30, "update/64": 0.25, "create/8": 0.2}}
	for _, tc := range []struct {
		name   string
		now    map[string]float64
		failed int
	}{
		{"as recorded", map[string]float64{"create/64": 0.30, "update/64": 0.25, "create/8": 0.2}, 0},
		{"faster", map[string]float64{"create/64": 0.50, "update/64": 0.40, "create/8": 0.3}, 0},
		{"a little slower (noise)", map[string]float64{"create/64": 0.19, "update/64": 0.16, "create/8": 0.13}, 0},
		{"one fell below 0.6x", map[string]float64{"create/64": 0.17, "update/64": 0.25, "create/8": 0.2}, 1},
		{"all fell", map[string]float64{"create/64": 0.05, "update/64": 0.05, "create/8": 0.05}, 3},
		{"a level not measured is not a failure", map[string]float64{"create/64": 0.30, "update/64": 0.25}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, failed := compareFigures(recorded, &figures{Ratios: tc.now}, 0.6)
			require.Len(t, rows, 3)
			require.Len(t, failed, tc.failed, "%v", failed)
		})
	}
}

// --record writes the figures --compare reads; a run below the recorded
// ratios fails with the ratios named, one at or above them passes.
func TestBenchRecordAndCompare(t *testing.T) {
	server := buildServer(t)
	dir := t.TempDir()
	recorded := filepath.Join(dir, "benchmarks.json")
	args := []string{"--server", server, "api", "--duration", "300ms", "--tenants", "20", "--nodegroups", "20", "--rate", "50", "--clients", "4"}
	out, err := runSelf(t, append(args, "--record", recorded)...)
	require.NoError(t, err, out)
	var f figures
	b, err := os.ReadFile(recorded)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &f))
	require.Contains(t, f.Ratios, "create/4")
	require.Contains(t, f.Ratios, "update/4")
	require.Greater(t, f.Ratios["create/4"], 0.0)
	require.Contains(t, f.OpsPerSecond, "publish/4")

	// Recorded ratios no run can reach: the comparison fails and names them.
	f.Ratios["create/4"], f.Ratios["update/4"] = 1000, 1000
	b, err = json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(recorded, b, 0o644))
	out, err = runSelf(t, append(args, "--compare", recorded)...)
	require.Error(t, err, out)
	require.Contains(t, out, "below the recorded figures")
	require.Contains(t, out, "create/4")

	// Recorded ratios any run reaches: it passes and prints the table.
	f.Ratios["create/4"], f.Ratios["update/4"] = 0.0001, 0.0001
	b, err = json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(recorded, b, 0o644))
	out, err = runSelf(t, append(args, "--compare", recorded)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "| create/4 | 0.00 |")

	out, err = runSelf(t, "--server", server, "api", "--compare", filepath.Join(dir, "missing.json"))
	require.Error(t, err)
	require.Contains(t, out, "missing.json")
}
