package upgrade

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func planMachine(name, group, role string) domain.Machine {
	return domain.Machine{Metadata: domain.ObjectMeta{Name: name}, Spec: domain.MachineSpec{NodeGroup: group, Role: role}}
}

func TestPlanUpgradeOrder(t *testing.T) {
	machines := []domain.Machine{
		planMachine("w-b2", "b", domain.RoleWorker), planMachine("cp-1", "cp", domain.RoleControlPlane),
		planMachine("w-a1", "a", domain.RoleWorker), planMachine("cp-3", "cp", domain.RoleControlPlane),
		planMachine("w-b1", "b", domain.RoleWorker), planMachine("cp-2", "cp", domain.RoleControlPlane),
	}
	from := map[string]string{"cp-1": "v1.12.0", "cp-2": "v1.12.0", "cp-3": "v1.12.0", "w-a1": "v1.13.0", "w-b1": "v1.12.0", "w-b2": "v1.12.1"}
	tests := []struct {
		name   string
		leader string
		want   []string
	}{
		{"leader last of the control planes", "cp-1", []string{"cp-2", "cp-3", "cp-1", "w-a1", "w-b1", "w-b2"}},
		{"another leader", "cp-2", []string{"cp-1", "cp-3", "cp-2", "w-a1", "w-b1", "w-b2"}},
		{"leader unknown: by name", "", []string{"cp-1", "cp-2", "cp-3", "w-a1", "w-b1", "w-b2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			steps := planUpgrade(machines, "v1.13.0", tc.leader, from)
			var names []string
			for _, s := range steps {
				names = append(names, s.Name)
				require.Equal(t, "v1.13.0", s.To)
				require.Equal(t, from[s.Name], s.From)
				if s.Name == "w-a1" {
					require.Equal(t, domain.StepDone, s.Phase, "already on the target")
				} else {
					require.Equal(t, domain.StepPending, s.Phase)
				}
			}
			require.Equal(t, tc.want, names)
		})
	}
}

func TestUpgradePathProblems(t *testing.T) {
	steps := func(pairs ...string) []domain.UpgradeMachine {
		var out []domain.UpgradeMachine
		for i := 0; i+1 < len(pairs); i += 2 {
			out = append(out, domain.UpgradeMachine{Name: "m" + string(rune('1'+i/2)), From: pairs[i], To: pairs[i+1]})
		}
		return out
	}
	require.Empty(t, upgradePathProblems(steps("v1.12.0", "v1.13.0", "v1.13.0", "v1.13.0", "v1.13.1", "v1.13.0"), domain.UpgradePathProblem))
	p := upgradePathProblems(steps("v1.12.0", "v1.13.0", "v1.11.0", "v1.13.0", "v1.14.0", "v1.13.0"), domain.UpgradePathProblem)
	require.Contains(t, p, "refused: m2: v1.11.0 to v1.13.0 skips a minor version")
	require.Contains(t, p, "m3: v1.14.0 to v1.13.0 is a downgrade")
	require.NotContains(t, p, "m1")
	var many []string
	for range 8 {
		many = append(many, "v1.10.0", "v1.13.0")
	}
	require.Contains(t, upgradePathProblems(steps(many...), domain.UpgradePathProblem), "(and 3 more machines)")
}

func TestNextStepAction(t *testing.T) {
	const from, to = "v1.12.0", "v1.13.0"
	tests := []struct {
		phase    string
		observed string // "" = unreachable
		want     stepAction
	}{
		{domain.StepPending, from, actUpgrade},
		{domain.StepPending, "", actUpgrade}, // the step waits for it, then reports it unreachable
		{domain.StepPending, to, actVerify},  // already on the target: verified, never upgraded
		// A drain cut short (kill -9) goes on: the machine was not touched.
		{domain.StepDraining, from, actUpgrade},
		{domain.StepDraining, "", actUpgrade},
		{domain.StepUpgrading, from, actUpgrade},
		{domain.StepUpgrading, "", actWait}, // the call got through: it is rebooting
		{domain.StepUpgrading, to, actVerify},
		{domain.StepRebooting, "", actWait},
		{domain.StepRebooting, from, actWait}, // not down yet, or came back without it: the wait tells
		{domain.StepRebooting, to, actVerify},
		{domain.StepVerifying, to, actVerify},
		{domain.StepVerifying, "", actVerify},
		{domain.StepRollingBack, to, actRollback},
		{domain.StepRollingBack, "", actRollback},
		{domain.StepDone, to, actNone},
		{domain.StepRolledBack, from, actNone},
		{domain.StepFailed, "", actNone},
	}
	for _, tc := range tests {
		t.Run(tc.phase+"/"+tc.observed, func(t *testing.T) {
			s := domain.UpgradeMachine{Name: "m", From: from, To: to, Phase: tc.phase}
			require.Equal(t, tc.want, nextStepAction(s, tc.observed), "got %s", nextStepAction(s, tc.observed))
		})
	}
}

func TestEtcdQuorumProblem(t *testing.T) {
	three := []string{"cp-1", "cp-2", "cp-3"}
	five := []string{"cp-1", "cp-2", "cp-3", "cp-4", "cp-5"}
	tests := []struct {
		name      string
		self      string
		members   []string
		unhealthy map[string]string
		want      string // fragment; "" = safe
	}{
		{"three healthy", "cp-1", three, nil, ""},
		{"a single member may go down", "cp-1", []string{"cp-1"}, nil, ""},
		{"the node itself unhealthy does not count", "cp-1", three, map[string]string{"cp-1": "x"}, ""},
		{"another of three unhealthy", "cp-1", three, map[string]string{"cp-3": "etcd is Stopped"},
			"etcd quorum would not survive taking cp-1 down: 1 of the other 2 members healthy, 2 needed; unhealthy: cp-3 (etcd is Stopped)"},
		{"five with one unhealthy", "cp-1", five, map[string]string{"cp-2": "x"}, ""},
		{"five with two unhealthy", "cp-1", five, map[string]string{"cp-2": "x", "cp-5": "y"}, "2 of the other 4 members healthy, 3 needed; unhealthy: cp-2 (x), cp-5 (y)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := etcdQuorumProblem(tc.self, tc.members, tc.unhealthy)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}

func TestUpgradeName(t *testing.T) {
	require.Equal(t, "talos-v1-13-0-42", upgradeName("talos-", "v1.13.0", 42))
	require.Equal(t, "talos-v1-14-0-beta-0-7", upgradeName("talos-", "v1.14.0-beta.0", 7))
	require.Equal(t, "kubernetes-v1-36-1-9", upgradeName("kubernetes-", "v1.36.1", 9))
	for _, prefix := range []string{"talos-", "kubernetes-"} {
		long := upgradeName(prefix, "v1.14.0-alpha.1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17.18.19.20", 123456789)
		require.LessOrEqual(t, len(long), domain.MaxNameLength)
		require.Empty(t, domain.ValidateName(long, "name"))
	}
}

func TestInstallImageFor(t *testing.T) {
	for _, tc := range []struct{ image, version, want string }{
		{"ghcr.io/siderolabs/installer:v1.12.0", "v1.13.0", "ghcr.io/siderolabs/installer:v1.13.0"},
		{"factory.talos.dev/installer/376567988ad3:v1.12.0", "v1.13.1", "factory.talos.dev/installer/376567988ad3:v1.13.1"},
		{"registry.local:5000/custom/installer:v1.12.0", "v1.13.0", "registry.local:5000/custom/installer:v1.13.0"},
		{"registry.local:5000/custom/installer", "v1.13.0", "registry.local:5000/custom/installer:v1.13.0"},
		{"ghcr.io/acme/installer:v1.12.0@sha256:0123abcd", "v1.13.0", "ghcr.io/acme/installer:v1.13.0"},
		{"ghcr.io/acme/installer@sha256:0123abcd", "v1.13.0", "ghcr.io/acme/installer:v1.13.0"},
		{"installer", "v1.13.0", "installer:v1.13.0"},
	} {
		t.Run(tc.image, func(t *testing.T) {
			require.Equal(t, tc.want, domain.InstallImageFor(tc.image, tc.version))
		})
	}
}

func TestTalosWriteBack(t *testing.T) {
	group := func(name, version string) domain.NodeGroup {
		return domain.NodeGroup{Metadata: domain.ObjectMeta{Name: name}, Spec: domain.NodeGroupSpec{TalosVersion: version}}
	}
	groups := []domain.NodeGroup{group("cp", ""), group("workers", ""), group("gpu", "v1.12.5")}
	covering := func(names ...string) func(string) bool {
		return func(ng string) bool { return len(names) == 0 || slices.Contains(names, ng) }
	}
	for _, tc := range []struct {
		name       string
		groups     []domain.NodeGroup
		covers     func(string) bool
		tenant     bool
		nodeGroups []string
	}{
		{"every group: the tenant and the override", groups, covering(), true, []string{"gpu"}},
		{"every group that follows the tenant", groups, covering("cp", "workers"), true, nil},
		{"one group that follows the tenant", groups, covering("workers"), false, []string{"workers"}},
		{"the override alone", groups, covering("gpu"), false, []string{"gpu"}},
		{"only overrides", []domain.NodeGroup{group("a", "v1.12.0"), group("b", "v1.12.1")}, covering(), false, []string{"a", "b"}},
		{"no groups", nil, covering(), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant, ngs := talosWriteBack(tc.groups, tc.covers)
			require.Equal(t, tc.tenant, tenant)
			require.Equal(t, tc.nodeGroups, ngs)
		})
	}
}

func TestWithSchematics(t *testing.T) {
	iscsi := (&domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}).ID()
	both := (&domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}).ID()
	for _, tc := range []struct {
		name      string
		phase     string
		from, to  string
		wantPhase string
		wantFrom  string
	}{
		{"same version, new schematic: re-imaged", domain.StepDone, iscsi, both, domain.StepPending, iscsi},
		{"same version and schematic: done", domain.StepDone, both, both, domain.StepDone, both},
		{"no schematic reported counts as vanilla", domain.StepDone, "", domain.VanillaSchematic, domain.StepDone, domain.VanillaSchematic},
		{"an explicit installImage: only the version counts", domain.StepDone, iscsi, "", domain.StepDone, ""},
		{"another version: upgraded either way", domain.StepPending, iscsi, iscsi, domain.StepPending, iscsi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := withSchematics([]domain.UpgradeMachine{{Name: "m", Phase: tc.phase, From: "v1.13.0", To: "v1.13.0"}},
				map[string]string{"m": tc.from}, map[string]string{"m": tc.to})
			require.Equal(t, tc.wantPhase, steps[0].Phase)
			require.Equal(t, tc.wantFrom, steps[0].FromSchematic)
			require.Equal(t, tc.to, steps[0].ToSchematic)
		})
	}
	s := domain.UpgradeMachine{Phase: domain.StepPending, From: "v1.13.0", To: "v1.13.0", FromSchematic: iscsi, ToSchematic: both}
	require.Equal(t, actVerify, nextStepAction(s, "v1.13.0+"+both), "back with the new schematic")
	require.Equal(t, actUpgrade, nextStepAction(s, "v1.13.0+"+iscsi), "untouched: still the old one")
	s.Phase = domain.StepRebooting
	require.Equal(t, actWait, nextStepAction(s, "v1.13.0+"+iscsi), "rebooting, not yet down")
}
