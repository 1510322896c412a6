package tfrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestUIWriter feeds uiWriter samples of `tofu apply -json` output
// (testdata/tofu-ui, OpenTofu 1.10) in pieces of several sizes, as a pipe
// delivers them.
func TestUIWriter(t *testing.T) {
	tests := []struct {
		file    string
		phases  int // how many times tofu said it started changing things
		summary domain.ApplyResources
		errors  []string
		logged  []string
		notLog  []string
	}{
		{file: "apply.jsonl", phases: 2, summary: domain.ApplyResources{Added: 2},
			logged: []string{"OpenTofu 1.10.10\n", "Plan: 1 to add, 0 to change, 0 to destroy.\n",
				"emulated_machine.cp[\"cp-0\"]: Creation complete after 1s [id=demo-cp-0]\n", "Apply complete! Resources: 2 added, 0 changed, 0 destroyed.\n"},
			notLog: []string{`"@level"`}},
		{file: "apply_error.jsonl", phases: 1,
			errors: []string{
				`emulated_machine.cp["cp-0"]: Could not create emulated machine: emulatednode "demo-cp-0" already exists`,
				"Error acquiring the state lock: HTTP remote state already locked:\nID=1234",
			},
			logged: []string{"Warning: Deprecated attribute\n  use hostname_prefix\n",
				"Error: Error acquiring the state lock\n  HTTP remote state already locked:\n  ID=1234\n"}},
		{file: "destroy.jsonl", phases: 1, summary: domain.ApplyResources{Destroyed: 3},
			logged: []string{"Destroy complete! Resources: 3 destroyed.\n"}},
		{file: "no_changes.jsonl", logged: []string{"No changes. Your infrastructure matches the configuration.\n"}},
		{file: "mixed_output.jsonl", phases: 1,
			logged: []string{"panic: something a provider printed on stderr\n", "{\"not\":\"a ui message\"}\n", "Modifying...\n"}},
		{file: "unterminated.jsonl", summary: domain.ApplyResources{Changed: 1},
			logged: []string{"Apply complete! Resources: 0 added, 1 changed, 0 destroyed.\n"}},
	}
	for _, tc := range tests {
		raw, err := os.ReadFile(filepath.Join("testdata", "tofu-ui", tc.file))
		require.NoError(t, err)
		for _, piece := range []int{1, 7, 64, len(raw)} {
			t.Run(fmt.Sprintf("%s in pieces of %d", tc.file, piece), func(t *testing.T) {
				var log strings.Builder
				phases := 0
				u := &uiWriter{log: &log, setPhase: func(p string) {
					require.Equal(t, domain.ApplyApplying, p)
					phases++
				}}
				for i := 0; i < len(raw); i += piece {
					n, err := u.Write(raw[i:min(i+piece, len(raw))])
					require.NoError(t, err)
					require.Equal(t, min(piece, len(raw)-i), n)
				}
				u.flush()
				require.Equal(t, tc.phases, phases)
				require.Equal(t, tc.summary, u.summary, "the apply's summary, not the plan's")
				require.Equal(t, tc.errors, u.errors)
				for _, s := range tc.logged {
					require.Contains(t, log.String(), s)
				}
				for _, s := range tc.notLog {
					require.NotContains(t, log.String(), s)
				}
				require.NotContains(t, log.String(), "\n\n", "blank lines are dropped")
			})
		}
	}
}
