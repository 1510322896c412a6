package emulator

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/require"
)

// TestRolesAllowed checks the role table against Talos's apid rules for the
// methods the emulator serves: who may call each, and who may not.
func TestRolesAllowed(t *testing.T) {
	t.Parallel()
	all := []role.Role{role.Admin, role.Operator, role.Reader, role.EtcdBackup}
	for _, tc := range []struct {
		method  string
		allowed []role.Role
	}{
		{svc + "Version", []role.Role{role.Admin, role.Operator, role.Reader}},
		{svc + "ServiceList", []role.Role{role.Admin, role.Operator, role.Reader}},
		{svc + "EtcdMemberList", []role.Role{role.Admin, role.Operator, role.Reader, role.EtcdBackup}},
		{svc + "EtcdStatus", []role.Role{role.Admin, role.Operator, role.Reader, role.EtcdBackup}},
		{svc + "EtcdSnapshot", []role.Role{role.Admin, role.Operator, role.EtcdBackup}},
		{svc + "EtcdRecover", []role.Role{role.Admin}},
		{svc + "Bootstrap", []role.Role{role.Admin}},
		{svc + "EtcdLeaveCluster", []role.Role{role.Admin}},
		{svc + "EtcdRemoveMemberByID", []role.Role{role.Admin}},
		{svc + "EtcdForfeitLeadership", []role.Role{role.Admin}},
		{svc + "Reboot", []role.Role{role.Admin, role.Operator}},
		{svc + "Kubeconfig", []role.Role{role.Admin}},
		{svc + "SomethingNew", []role.Role{role.Admin}}, // unknown methods are admin-only
	} {
		t.Run(tc.method, func(t *testing.T) {
			allowed := RolesAllowed(tc.method)
			for _, r := range all {
				want := false
				for _, a := range tc.allowed {
					want = want || a == r
				}
				require.Equal(t, want, role.MakeSet(r).IncludesAny(allowed), "%s may call: %v", r, want)
			}
		})
	}
}
