package talos

import (
	"fmt"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The version rules a run checks before it touches a machine, and the API
// before it stores a spec a run would refuse. They are pure: the callers
// gather the versions (the machines' observed Talos versions, the Kubernetes
// version their configs carry) and report the answer where it belongs (a
// Failed run, a 422 cause). Which Kubernetes versions a Talos version
// supports is Talos machinery's own matrix (compatibility), not a copy.

// KubernetesPathProblem says why machines whose configs carry Kubernetes
// from cannot move to to in one run ("" when they can): Kubernetes goes
// forward only (no downgrade, patch versions included: control-plane
// components do not support going back), one minor version at a time, and
// never across a major version.
func KubernetesPathProblem(from, to string) string {
	f, ok := domain.ParseVersion(from)
	if !ok {
		return fmt.Sprintf("%q is not a semantic version", from)
	}
	t, ok := domain.ParseVersion(to)
	if !ok {
		return fmt.Sprintf("%q is not a semantic version", to)
	}
	from, to = vPrefixed(from), vPrefixed(to)
	switch {
	case f.Major != t.Major:
		return fmt.Sprintf("Kubernetes %s to %s changes the major version, which is not supported", from, to)
	case compareVersions(t, f) < 0:
		return fmt.Sprintf("Kubernetes %s to %s is a downgrade, which Kubernetes does not support", from, to)
	case t.Minor > f.Minor+1:
		return fmt.Sprintf("Kubernetes %s to %s skips a minor version; upgrade to v%d.%d.x first", from, to, f.Major, f.Minor+1)
	}
	return ""
}

// KubernetesSupportProblem says why Talos talosVersion does not run
// Kubernetes kubernetesVersion ("" when it does), by machinery's matrix.
// A Talos version newer than the matrix knows is refused too: nothing
// vouches for the pair.
func KubernetesSupportProblem(kubernetesVersion, talosVersion string) string {
	k, err := compatibility.ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return fmt.Sprintf("%q is not a Kubernetes version: %v", kubernetesVersion, err)
	}
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talosVersion})
	if err != nil {
		return fmt.Sprintf("%q is not a Talos version: %v", talosVersion, err)
	}
	if err := k.SupportedWith(tv); err != nil {
		return err.Error()
	}
	return ""
}

// KubernetesUpgradeProblem says why a Kubernetes run from from to to would be
// refused on machines running the given Talos versions ("" when it would
// not): the path first, then every distinct Talos version's support.
func KubernetesUpgradeProblem(from, to string, talosVersions []string) string {
	if p := KubernetesPathProblem(from, to); p != "" {
		return p
	}
	var bad []string
	for _, v := range distinct(talosVersions) {
		if p := KubernetesSupportProblem(to, v); p != "" {
			bad = append(bad, p)
		}
	}
	return strings.Join(bad, "; ")
}

// TalosUpgradeProblem says why a machine on Talos from cannot be upgraded to
// to in one run ("" when it can): domain.UpgradePathProblem's path rules,
// then, for a move to another minor version, whether to still runs the
// Kubernetes version the machine's config carries (kubernetesVersion; ""
// skips that check). The support matrix is per minor version, so a patch
// move cannot change what runs; it is never refused for it.
func TalosUpgradeProblem(from, to, kubernetesVersion string) string {
	if p := domain.UpgradePathProblem(from, to); p != "" {
		return p
	}
	f, _ := domain.ParseVersion(from)
	t, _ := domain.ParseVersion(to)
	if kubernetesVersion == "" || f.Minor == t.Minor {
		return ""
	}
	return KubernetesSupportProblem(kubernetesVersion, to)
}

func distinct(vs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

func vPrefixed(s string) string {
	if strings.HasPrefix(s, "v") {
		return s
	}
	return "v" + s
}

// compareVersions orders versions by major, minor, patch; a pre-release
// comes before its release.
func compareVersions(a, b domain.Version) int {
	for _, d := range []int{a.Major - b.Major, a.Minor - b.Minor, a.Patch - b.Patch} {
		if d != 0 {
			return d
		}
	}
	switch {
	case a.Pre == b.Pre:
		return 0
	case a.Pre == "":
		return 1
	case b.Pre == "":
		return -1
	}
	return strings.Compare(a.Pre, b.Pre)
}
