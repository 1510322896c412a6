package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDescribeWait(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	w := domain.BeginWait(nil, "control planes cp-2, cp-3 to join etcd after the restore", t0, 10*time.Minute)
	w.Observe("1 of 3 control planes serve etcd (1 listed)", t0.Add(time.Minute))
	restore, _ := json.Marshal(domain.RestoreStatus{Phase: domain.RestoreRunning, Stage: domain.StageJoining, Wait: &w})
	mw := domain.BeginWait(nil, "cp-1 to be back after its config reboot", t0, 10*time.Minute)
	machine, _ := json.Marshal(domain.MachineStatus{Stage: "Rebooting", ConfigWait: &mw})
	for _, tc := range []struct {
		name   string
		status json.RawMessage
		want   string
	}{
		{"restore", restore, "Waiting:           waiting for control planes cp-2, cp-3 to join etcd after the restore: 1 of 3 control planes serve etcd (1 listed), 4m10s (fails in 5m50s)\n"},
		{"machine", machine, "Waiting:           waiting for cp-1 to be back after its config reboot, 4m10s (fails in 5m50s)\n"},
		{"waiting for nothing", json.RawMessage(`{"phase":"Succeeded"}`), ""},
		{"no status", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			describeWait(&b, tc.status, t0.Add(4*time.Minute+10*time.Second))
			require.Equal(t, tc.want, b.String())
		})
	}
}
