package talos

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKubernetesPathProblem(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     string // a part of the answer; "" means allowed
	}{
		{"v1.35.0", "v1.35.0", ""},
		{"v1.35.0", "v1.35.4", ""},
		{"v1.35.4", "v1.36.0", ""},
		{"1.35.4", "v1.36.2", ""},
		{"v1.36.0-rc.1", "v1.36.0", ""},
		{"v1.35.2", "v1.35.1", "v1.35.2 to v1.35.1 is a downgrade"},
		{"v1.36.0", "v1.35.9", "is a downgrade"},
		{"v1.36.0", "v1.36.0-rc.1", "is a downgrade"},
		{"v1.34.1", "v1.36.0", "v1.34.1 to v1.36.0 skips a minor version; upgrade to v1.35.x first"},
		{"v1.36.0", "v2.0.0", "changes the major version"},
		{"latest", "v1.36.0", `"latest" is not a semantic version`},
		{"v1.36.0", "", `"" is not a semantic version`},
	} {
		t.Run(tc.from+"->"+tc.to, func(t *testing.T) {
			got := KubernetesPathProblem(tc.from, tc.to)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}

// The matrix is machinery's: Talos 1.12 runs Kubernetes 1.30-1.35, Talos 1.13
// runs 1.31-1.36.
func TestKubernetesSupportProblem(t *testing.T) {
	for _, tc := range []struct {
		k8s, talos string
		want       string
	}{
		{"v1.36.0", "v1.13.0", ""},
		{"v1.36.5", "v1.13.2", ""},
		{"v1.31.0", "v1.13.0", ""},
		{"v1.35.2", "v1.12.4", ""},
		{"v1.36.0", "v1.12.0", "version of Kubernetes 1.36.0 is too new to be used with Talos 1.12.0"},
		{"v1.30.9", "v1.13.0", "version of Kubernetes 1.30.9 is too old to be used with Talos 1.13.0"},
		{"v1.36.0", "v1.99.0", "compatibility with version 1.99.0 is not supported"},
		{"nope", "v1.13.0", `"nope" is not a Kubernetes version`},
		{"v1.36.0", "nope", `"nope" is not a Talos version`},
	} {
		t.Run(tc.k8s+"@"+tc.talos, func(t *testing.T) {
			got := KubernetesSupportProblem(tc.k8s, tc.talos)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}

func TestKubernetesUpgradeProblem(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		talos    []string
		want     []string // parts of the answer; none means allowed
	}{
		{"next minor on every machine", "v1.35.2", "v1.36.0", []string{"v1.13.0", "v1.13.1", "v1.13.0"}, nil},
		{"no machines", "v1.35.2", "v1.36.0", nil, nil},
		{"the path goes first", "v1.34.0", "v1.36.0", []string{"v1.12.0"}, []string{"skips a minor version"}},
		{"one Talos version too old", "v1.35.2", "v1.36.0", []string{"v1.13.0", "v1.12.3", "v1.12.3"},
			[]string{"too new to be used with Talos 1.12.3"}},
		{"each unsupported version once", "v1.35.2", "v1.36.0", []string{"v1.12.3", "v1.11.0", "v1.12.3"},
			[]string{"Talos 1.11.0; version of Kubernetes 1.36.0 is too new to be used with Talos 1.12.3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := KubernetesUpgradeProblem(tc.from, tc.to, tc.talos)
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
		})
	}
}

func TestTalosUpgradeProblem(t *testing.T) {
	for _, tc := range []struct {
		name          string
		from, to, k8s string
		want          string
	}{
		{"next minor, Kubernetes supported", "v1.12.3", "v1.13.0", "v1.35.0", ""},
		{"patch", "v1.13.0", "v1.13.2", "v1.36.0", ""},
		{"patch back", "v1.13.2", "v1.13.0", "v1.36.0", ""},
		{"no Kubernetes check without a version", "v1.12.0", "v1.13.0", "", ""},
		{"minor downgrade", "v1.13.0", "v1.12.4", "v1.35.0", "is a downgrade across a minor version"},
		{"minor skip", "v1.11.0", "v1.13.0", "v1.33.0", "skips a minor version; upgrade to v1.12.x first"},
		{"Kubernetes too old for the target", "v1.12.0", "v1.13.0", "v1.30.2", "too old to be used with Talos 1.13.0"},
		{"a minor back is a downgrade first", "v1.13.1", "v1.12.9", "v1.36.0", "downgrade"},
		{"a patch keeps the matrix row", "v1.12.0", "v1.12.1", "v1.36.0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TalosUpgradeProblem(tc.from, tc.to, tc.k8s)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}
