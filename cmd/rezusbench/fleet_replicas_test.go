package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       int64
		err        bool
	}{
		// utime 1200, stime 300, cutime 4000, cstime 500 (fields 14-17).
		{"plain", "4242 (rezuscloud) S 1 4242 4242 0 -1 4194560 100 200 0 0 1200 300 4000 500 20 0 12 0 100 0 0", 6000, false},
		{"a command of spaces and parentheses", "7 (a b) (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 5 0 0", 10, false},
		{"cut short", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 1 2", 0, true},
		{"no command", "garbage", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := statTicks(tc.line)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	self, err := cpuTicks(os.Getpid())
	require.NoError(t, err, "this process's own stat parses")
	require.GreaterOrEqual(t, self, int64(0))
}

func TestReplicaShares(t *testing.T) {
	n := func(v int) *int { return &v }
	beats := domain.ReplicaList{Items: []domain.Replica{
		{Holder: "host-a-101", Tenants: n(2)},
		{Holder: "host-a-202", Tenants: n(1)},
		{Holder: "elsewhere-999", Tenants: n(7)}, // not one of this run's
	}}
	apply := func(tenant, replica, holder string) domain.Apply {
		a := domain.Apply{Status: domain.ApplyStatus{Replica: replica, Holder: holder}}
		a.Metadata.Tenant = tenant
		return a
	}
	applies := []domain.Apply{
		apply("t1", "host-a-101", "host-a-101"),
		apply("t1", "host-a-101", "host-a-101"),
		apply("t2", "", "host-a-101"), // recorded before status.replica: its holder
		apply("t3", "host-a-202", "host-a-202"),
		apply("t4", "", ""),
		apply("t5", "elsewhere-999", ""),
	}
	shares, unnamed := replicaShares([]int{101, 202, 303}, []int64{100, 50, 0}, []int64{600, 350, 10}, []int64{1100, 550, 20}, beats, applies)
	require.Equal(t, []replicaShare{
		{Holder: "host-a-101", Tenants: 2, Applied: 2, Applies: 3, BuildCPU: 5, CPU: 10},
		{Holder: "host-a-202", Tenants: 1, Applied: 1, Applies: 1, BuildCPU: 3, CPU: 5},
		{Holder: "pid 303", BuildCPU: 0.1, CPU: 0.2}, // no heartbeat: named by its pid
	}, shares)
	require.Equal(t, 2, unnamed)
}
