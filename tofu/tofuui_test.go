package tofu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestUIWriter feeds UIWriter samples of `tofu apply -json` output
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
				u := &UIWriter{Log: &log, SetPhase: func(p string) {
					require.Equal(t, domain.ApplyApplying, p)
					phases++
				}}
				for i := 0; i < len(raw); i += piece {
					n, err := u.Write(raw[i:min(i+piece, len(raw))])
					require.NoError(t, err)
					require.Equal(t, min(piece, len(raw)-i), n)
				}
				u.Flush()
				require.Equal(t, tc.phases, phases)
				require.Equal(t, tc.summary, u.Summary, "the apply's summary, not the plan's")
				require.Equal(t, tc.errors, u.Errors)
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

func TestUIWriterReadsTofuJSON(t *testing.T) {
	// Lines as `tofu apply -json` prints them (OpenTofu 1.10).
	lines := []string{
		`{"@level":"info","@message":"OpenTofu 1.10.10","@module":"tofu.ui","type":"version","tofu":"1.10.10","ui":"1.2"}`,
		`{"@level":"info","@message":"emulated_machine.ng_cp[\"cp-0\"]: Plan to create","type":"planned_change","change":{"resource":{"addr":"emulated_machine.ng_cp[\"cp-0\"]","module":"","resource_type":"emulated_machine"},"action":"create"}}`,
		`{"@level":"info","@message":"emulated_machine.ng_w[\"w-0\"]: Plan to replace","type":"planned_change","change":{"resource":{"addr":"emulated_machine.ng_w[\"w-0\"]"},"action":"replace"}}`,
		`{"@level":"info","@message":"Plan: 2 to add, 0 to change, 0 to destroy.","type":"change_summary","changes":{"add":2,"change":0,"import":0,"remove":0,"operation":"plan"}}`,
		`{"@level":"info","@message":"emulated_machine.ng_cp[\"cp-0\"]: Creating...","type":"apply_start"}`,
		`{"@level":"error","@message":"Error: Could not create emulated machine","type":"diagnostic","diagnostic":{"severity":"error","summary":"Could not create emulated machine","detail":"emulatednode \"x\" already exists","address":"emulated_machine.ng_cp[\"cp-0\"]"}}`,
		`{"@level":"info","@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","type":"change_summary","changes":{"add":1,"change":0,"import":0,"remove":0,"operation":"apply"}}`,
		`not json at all`,
	}
	var log strings.Builder
	var phases []string
	u := &UIWriter{Log: &log, SetPhase: func(p string) { phases = append(phases, p) }}
	// Written in odd pieces, as a pipe delivers them.
	all := strings.Join(lines, "\n")
	for i := 0; i < len(all); i += 37 {
		_, _ = u.Write([]byte(all[i:min(i+37, len(all))]))
	}
	u.Flush()
	require.Equal(t, []string{domain.ApplyApplying}, phases)
	require.Equal(t, domain.ApplyResources{Added: 1}, u.Summary, "the apply's summary, not the plan's")
	require.Equal(t, domain.ApplyResources{Added: 2}, u.Plan, "the plan's summary")
	require.Equal(t, []domain.DriftResource{{Address: `emulated_machine.ng_cp["cp-0"]`, Action: "create"}, {Address: `emulated_machine.ng_w["w-0"]`, Action: "replace"}}, u.Changes)
	require.Equal(t, []string{`emulated_machine.ng_cp["cp-0"]: Could not create emulated machine: emulatednode "x" already exists`}, u.Errors)
	require.Contains(t, log.String(), "Apply complete! Resources: 1 added")
	require.Contains(t, log.String(), "  emulatednode \"x\" already exists", "diagnostic details are logged")
	require.Contains(t, log.String(), "not json at all\n")
}
