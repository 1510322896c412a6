package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRestoreSpecDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   string
		fields []string
	}{
		{"none", `{"backup":"b1"}`, nil},
		{"both", `{"backup":"b1","deadlines":{"join":"30m","check":"90s"}}`, nil},
		{"too short", `{"backup":"b1","deadlines":{"join":"5s"}}`, []string{"spec.deadlines.join"}},
		{"too long and not a duration", `{"backup":"b1","deadlines":{"join":"25h","check":"soon"}}`, []string{"spec.deadlines.join", "spec.deadlines.check"}},
		{"no backup", `{"deadlines":{"check":"1m"}}`, []string{"spec.backup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, causes := RestoreKind.NormalizeSpec(json.RawMessage(tc.spec))
			var fields []string
			for _, c := range causes {
				fields = append(fields, c.Field)
			}
			require.Equal(t, tc.fields, fields, "%v", causes)
		})
	}

	d := &RestoreDeadlines{Join: "30m"}
	require.Equal(t, 30*time.Minute, d.Duration(StageJoining, 10*time.Minute))
	require.Equal(t, 10*time.Minute, d.Duration(StageChecking, 10*time.Minute), "unset: the default")
	require.Equal(t, 10*time.Minute, (*RestoreDeadlines)(nil).Duration(StageJoining, 10*time.Minute))
}

// A status recorded before waits were recorded reads as waiting for
// nothing; one with a wait keeps it, and a wait out of bounds is refused.
func TestRestoreStatusWait(t *testing.T) {
	out, causes := RestoreKind.NormalizeStatus(json.RawMessage(`{"phase":"Running","stage":"Joining","member":"cp-1"}`))
	require.Nil(t, causes)
	var st RestoreStatus
	require.NoError(t, json.Unmarshal(out, &st))
	require.Nil(t, st.Wait)

	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	w := BeginWait(nil, "control planes cp-2, cp-3 to join etcd after the restore", t0, 10*time.Minute)
	st.Wait = &w
	raw, err := json.Marshal(st)
	require.NoError(t, err)
	out, causes = RestoreKind.NormalizeStatus(raw)
	require.Nil(t, causes)
	var back RestoreStatus
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, w.Deadline, back.Wait.Deadline)

	st.Wait.Deadline = t0.Add(-time.Second)
	raw, _ = json.Marshal(st)
	_, causes = RestoreKind.NormalizeStatus(raw)
	require.Len(t, causes, 1)
	require.Equal(t, "status.wait.deadline", causes[0].Field)
}

// A machine status recorded before config waits reads without one; a
// config wait out of bounds is refused at its field.
func TestMachineStatusConfigWait(t *testing.T) {
	out, causes := MachineKind.NormalizeStatus(json.RawMessage(`{"stage":"Running","ready":true,"configUpToDate":true}`))
	require.Nil(t, causes)
	var st MachineStatus
	require.NoError(t, json.Unmarshal(out, &st))
	require.Nil(t, st.ConfigWait)

	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	w := BeginWait(nil, "cp-2 to be back after its config reboot", t0, 10*time.Minute)
	w.Deadline = t0.Add(-time.Minute)
	st.ConfigWait = &w
	raw, _ := json.Marshal(st)
	_, causes = MachineKind.NormalizeStatus(raw)
	require.Len(t, causes, 1)
	require.Equal(t, "status.configWait.deadline", causes[0].Field)
}
