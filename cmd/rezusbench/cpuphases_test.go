package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCPUPhases: perf script's samples are summed by process (a role by
// pid, tofu, a plugin by its truncated comm, another rezuscloud as the
// sandbox launcher) and by phase (the first rule a frame matches).
func TestCPUPhases(t *testing.T) {
	f, err := os.Open("testdata/perf-script.txt")
	require.NoError(t, err)
	defer f.Close()
	p, err := readPerfScript(f, map[int]string{100: "server"})
	require.NoError(t, err)
	const s = 0.002004008
	require.InDelta(t, 7*s, p.total, 1e-9)
	require.InDelta(t, 3*s, p.kinds["tofu"], 1e-9)
	require.InDelta(t, 2*s, p.kinds["server"], 1e-9)
	require.InDelta(t, s, p.kinds["provider emulated"], 1e-9, "the comm is cut at 15 bytes: named by its binary")
	require.InDelta(t, s, p.kinds["tofu sandbox launcher"], 1e-9)
	for _, tc := range []struct{ kind, phase string }{
		{"tofu", "kernel (exec, page faults, I/O)"},
		{"tofu", "state key derivation (pbkdf2)"},
		{"tofu", "graph walk (refresh, plan, apply)"},
		{"provider emulated", "start-up (package init, loading)"},
		{"tofu sandbox launcher", "start-up (package init, loading)"},
		{"server", "siderolabs/crypto/x509"},
		{"server", "rezuscloud/rezuscloud/controllers/apply"},
	} {
		require.InDelta(t, s, p.phases[[2]string{tc.kind, tc.phase}], 1e-9, "%s: %s", tc.kind, tc.phase)
	}
	var out bytes.Buffer
	p.print(&out, 2)
	require.Contains(t, out.String(), "| tofu | 0.003 | 43 % |")

	_, err = readPerfScript(strings.NewReader("garbage\n"), nil)
	require.ErrorContains(t, err, "not a perf script sample header")
	_, err = readPerfScript(strings.NewReader(""), nil)
	require.ErrorContains(t, err, "no samples")
}
