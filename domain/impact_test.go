package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecideMachineImpact(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name   string
		facts  ImpactFacts
		action string
		reboot bool
		drain  bool
		detail string
	}{
		{"untouched", ImpactFacts{Exists: true, Wanted: true}, ImpactNone, false, false, ""},
		{"a label: in place", ImpactFacts{Exists: true, Wanted: true, ConfigChanges: true, Reboot: &no}, ImpactReconfigure, false, false, ""},
		{"a kernel arg: reboot, drained first", ImpactFacts{Exists: true, Wanted: true, ConfigChanges: true, Reboot: &yes}, ImpactReboot, true, true, ""},
		{"the node did not answer", ImpactFacts{Exists: true, Wanted: true, ConfigChanges: true, Unanswered: "unreachable"}, ImpactReconfigure, false, false, "unknown: unreachable"},
		{"the install disk", ImpactFacts{Exists: true, Wanted: true, ConfigChanges: true, Reboot: &no, InstallChanges: true}, ImpactReconfigure, false, false, "next install or upgrade"},
		{"the count goes down", ImpactFacts{Exists: true, Wanted: false, ConfigChanges: true}, ImpactDestroy, false, true, "destroyed"},
		{"the count goes up", ImpactFacts{Wanted: true}, ImpactCreate, false, false, "fresh config"},
		{"neither there nor wanted", ImpactFacts{}, ImpactNone, false, false, ""},
		{"a new schematic: re-imaged, drained first", ImpactFacts{Exists: true, Wanted: true, ConfigChanges: true, Reboot: &no, InstallChanges: true, Reimage: true,
			FromSchematic: VanillaSchematic, ToSchematic: "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"}, ImpactReimage, true, true, "re-imaged at the same Talos version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := DecideMachineImpact(tc.facts)
			require.Equal(t, tc.action, m.Action)
			require.Equal(t, tc.reboot, m.Reboot)
			require.Equal(t, tc.drain, m.Drain)
			if tc.detail == "" {
				require.Empty(t, m.Details)
			} else {
				require.Contains(t, m.Details, tc.detail)
			}
		})
	}
	require.Equal(t, "1 rebooted (drained first), 0 reconfigured in place, 1 created, 0 destroyed, 2 unchanged",
		ImpactSummary([]MachineImpact{{Action: ImpactReboot}, {Action: ImpactCreate}, {Action: ImpactNone}, {Action: ImpactNone}}))
	require.Equal(t, "0 rebooted (drained first), 2 re-imaged (drained first), 0 reconfigured in place, 0 created, 0 destroyed, 0 unchanged",
		ImpactSummary([]MachineImpact{{Action: ImpactReimage}, {Action: ImpactReimage}}))
}
