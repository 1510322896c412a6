package upgrade

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideDrain(t *testing.T) {
	no := false
	yes := true
	for _, tc := range []struct {
		name     string
		haveKube bool
		noDrain  bool
		ng       *domain.NodeGroupSpec
		skip     string
		want     bool
		timeout  time.Duration
	}{
		{name: "default: drained for 10m", haveKube: true, ng: &domain.NodeGroupSpec{}, want: true, timeout: 10 * time.Minute},
		{name: "drain: true and a timeout", haveKube: true, ng: &domain.NodeGroupSpec{Drain: &yes, DrainTimeout: "90s"}, want: true, timeout: 90 * time.Second},
		{name: "0 waits forever", haveKube: true, ng: &domain.NodeGroupSpec{DrainTimeout: "0"}, want: true, timeout: 0},
		{name: "the group opts out", haveKube: true, ng: &domain.NodeGroupSpec{Drain: &no}},
		{name: "the run opts out", haveKube: true, noDrain: true, ng: &domain.NodeGroupSpec{}},
		{name: "no Kubernetes client", ng: &domain.NodeGroupSpec{}},
		{name: "light emulator", haveKube: true, ng: &domain.NodeGroupSpec{}, skip: "light"},
		{name: "the group is gone", haveKube: true, want: true, timeout: 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideDrain(tc.haveKube, tc.noDrain, tc.ng, tc.skip)
			require.Equal(t, tc.want, got.drain, got.why)
			require.Equal(t, tc.timeout, got.timeout)
			if !tc.want {
				require.NotEmpty(t, got.why)
			}
		})
	}
}
