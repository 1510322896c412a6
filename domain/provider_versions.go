package domain

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxProviderVersions bounds each list of a Provider's spec.versions.
const MaxProviderVersions = 64

// ProviderVersions are the versions the machines a Provider builds can run:
// the Kubernetes versions whose images its infrastructure carries, the Talos
// versions it has images of. The API refuses a tenant, node group or
// Upgrade that would take a machine of the Provider to a version outside a
// list, so that a change no machine can make is not accepted only to wait
// forever (issue 43). A list absent or empty restricts nothing; a Provider
// stored before spec.versions existed keeps meaning "any version".
type ProviderVersions struct {
	// Kubernetes are the Kubernetes versions (exact semantic versions,
	// e.g. v1.35.4) the machines can run.
	Kubernetes []string `json:"kubernetes,omitempty"`
	// Talos are the Talos versions the machines can run.
	Talos []string `json:"talos,omitempty"`
}

// Default writes each list in its canonical form: a leading "v", oldest
// first, no duplicates. A list holding a version that does not parse is
// left as given, so that Validate's causes index it as the user wrote it.
func (v *ProviderVersions) Default() {
	v.Kubernetes = canonicalVersions(v.Kubernetes)
	v.Talos = canonicalVersions(v.Talos)
}

// Empty reports whether v restricts nothing.
func (v *ProviderVersions) Empty() bool {
	return v == nil || len(v.Kubernetes) == 0 && len(v.Talos) == 0
}

// Validate reports every bad version and a list too long.
func (v *ProviderVersions) Validate(f *field.Path) []Cause {
	causes := validateVersionList(v.Kubernetes, f.Child("kubernetes"))
	return append(causes, validateVersionList(v.Talos, f.Child("talos"))...)
}

// KubernetesProblem answers "" when machines of the Provider named provider
// can run Kubernetes version, else why not, naming the versions they run:
// `provider "emulated" runs Kubernetes v1.35.4, v1.36.1 only, not v1.35.5`.
func (v *ProviderVersions) KubernetesProblem(provider, version string) string {
	if v == nil {
		return ""
	}
	return versionProblem(provider, "Kubernetes", v.Kubernetes, version)
}

// TalosProblem does the same for a Talos version.
func (v *ProviderVersions) TalosProblem(provider, version string) string {
	if v == nil {
		return ""
	}
	return versionProblem(provider, "Talos", v.Talos, version)
}

func versionProblem(provider, what string, list []string, version string) string {
	if len(list) == 0 {
		return ""
	}
	if _, ok := ParseVersion(version); ok {
		version = canonicalVersion(version)
	}
	if slices.Contains(list, version) {
		return ""
	}
	return fmt.Sprintf("provider %q runs %s %s only, not %s", provider, what, strings.Join(list, ", "), version)
}

// canonicalVersions is list with a leading "v" on each version, sorted by
// semantic version (ties, which differ in build metadata only, by text),
// without duplicates; list itself when one of them does not parse.
func canonicalVersions(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	parsed := make([]*semver.Version, len(list))
	for i, s := range list {
		if _, ok := ParseVersion(s); !ok {
			return list
		}
		parsed[i], _ = semver.StrictNewVersion(strings.TrimPrefix(s, "v"))
	}
	order := make([]int, len(list))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := parsed[a].Compare(parsed[b]); c != 0 {
			return c
		}
		return strings.Compare(parsed[a].Original(), parsed[b].Original())
	})
	out := make([]string, 0, len(list))
	for _, i := range order {
		s := canonicalVersion(list[i])
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

func validateVersionList(list []string, f *field.Path) []Cause {
	var causes []Cause
	if len(list) > MaxProviderVersions {
		causes = append(causes, Cause{Field: f.String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d versions", MaxProviderVersions)})
	}
	for i, s := range list {
		causes = append(causes, validateVersion(s, f.Index(i))...)
	}
	return causes
}

// GroupVersionProblems says, per Provider of groups that does not run
// version, which of the groups build on it and why: "node groups cp,
// workers: provider "emulated" runs Kubernetes v1.35.4, v1.36.1 only, not
// v1.35.5", in the Providers' order. versionsOf gives a Provider's
// spec.versions (nil: any); problem picks the list
// ((*ProviderVersions).KubernetesProblem or TalosProblem). The API turns
// each into a cause, the upgrade saga into the reason it refuses a run.
func GroupVersionProblems(version string, groups []NodeGroup, versionsOf func(provider string) *ProviderVersions,
	problem func(v *ProviderVersions, provider, version string) string) []string {
	byProvider := map[string][]string{}
	for _, g := range groups {
		byProvider[g.Spec.Provider] = append(byProvider[g.Spec.Provider], g.Metadata.Name)
	}
	names := make([]string, 0, len(byProvider))
	for n := range byProvider {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		p := problem(versionsOf(n), n, version)
		if p == "" {
			continue
		}
		gs := byProvider[n]
		sort.Strings(gs)
		noun := "node groups"
		if len(gs) == 1 {
			noun = "node group"
		}
		out = append(out, fmt.Sprintf("%s %s: %s", noun, strings.Join(gs, ", "), p))
	}
	return out
}
