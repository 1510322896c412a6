package drain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecide(t *testing.T) {
	no := false
	yes := true
	for _, tc := range []struct {
		name     string
		haveKube bool
		optOut   string
		ng       *domain.NodeGroupSpec
		skip     string
		want     bool
		timeout  time.Duration
	}{
		{name: "default: drained for 10m", haveKube: true, ng: &domain.NodeGroupSpec{}, want: true, timeout: 10 * time.Minute},
		{name: "drain: true and a timeout", haveKube: true, ng: &domain.NodeGroupSpec{Drain: &yes, DrainTimeout: "90s"}, want: true, timeout: 90 * time.Second},
		{name: "0 waits forever", haveKube: true, ng: &domain.NodeGroupSpec{DrainTimeout: "0"}, want: true, timeout: 0},
		{name: "the group opts out", haveKube: true, ng: &domain.NodeGroupSpec{Drain: &no}},
		{name: "the run opts out", haveKube: true, optOut: "the run says noDrain", ng: &domain.NodeGroupSpec{}},
		{name: "no Kubernetes client", ng: &domain.NodeGroupSpec{}},
		{name: "light emulator", haveKube: true, ng: &domain.NodeGroupSpec{}, skip: "light"},
		{name: "light emulator, group opted in", haveKube: true, ng: &domain.NodeGroupSpec{Drain: &yes}, skip: "light"},
		{name: "the group is gone", haveKube: true, want: true, timeout: 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.haveKube, tc.optOut, tc.ng, tc.skip)
			require.Equal(t, tc.want, got.Drain, got.Why)
			require.Equal(t, tc.timeout, got.Timeout)
			if !tc.want {
				require.NotEmpty(t, got.Why)
			}
		})
	}
}

func TestNodeName(t *testing.T) {
	m := &domain.Machine{Metadata: domain.ObjectMeta{Name: "workers-1"}}
	require.Equal(t, "workers-1", NodeName(m))
	m.Spec.Hostname = "w1"
	require.Equal(t, "w1", NodeName(m))
}
