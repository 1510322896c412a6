package apply

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestKubernetesVersionAfterRun: the first successful apply records the
// Kubernetes version the configs were rendered with; nothing else moves it.
func TestKubernetesVersionAfterRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		was     string
		end     runEnd
		destroy bool
		want    string
	}{
		{"first success records it", "", endSucceeded, false, "v1.36.0"},
		{"a later success keeps what runs", "v1.35.2", endSucceeded, false, "v1.35.2"},
		{"a failed apply records nothing", "", endFailed, false, ""},
		{"a canceled apply records nothing", "", endCanceled, false, ""},
		{"a destroy records nothing", "", endSucceeded, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := domain.TenantStatus{KubernetesVersion: tc.was}
			kubernetesVersionAfterRun(&s, tc.end, tc.destroy, "v1.36.0")
			require.Equal(t, tc.want, s.KubernetesVersion)
		})
	}
}
