package emulator

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

const svc = "/machine.MachineService/"

// maintenanceMethods are all a node without a config answers, as Talos's
// maintenance service does.
var maintenanceMethods = map[string]bool{
	svc + "Version":            true,
	svc + "ApplyConfiguration": true,
	// `talosctl reset --wait` knows a reset is done when this answers.
	"/storage.StorageService/Disks": true,
}

// cosiService is the prefix of the COSI resource API's methods.
const cosiService = "/cosi.resource.State/"

var (
	readers   = role.MakeSet(role.Admin, role.Operator, role.Reader)
	operators = role.MakeSet(role.Admin, role.Operator)
	admins    = role.MakeSet(role.Admin)
	// etcdReaders and etcdBackups add os:etcd:backup, which Talos grants the
	// etcd calls a backup job needs: finding a healthy member and snapshotting it.
	etcdReaders = role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)
	etcdBackups = role.MakeSet(role.Admin, role.Operator, role.EtcdBackup)
)

// methodRoles are the roles allowed to call each method, following Talos's
// apid rules; a method not listed is admin-only.
var methodRoles = map[string]role.Set{
	svc + "Version":                 readers,
	svc + "ServiceList":             readers,
	svc + "EtcdMemberList":          etcdReaders,
	svc + "EtcdStatus":              etcdReaders,
	svc + "EtcdSnapshot":            etcdBackups,
	svc + "Dmesg":                   readers,
	svc + "Logs":                    readers,
	svc + "Events":                  readers,
	svc + "Memory":                  readers,
	svc + "Containers":              readers,
	svc + "Read":                    admins,
	"/time.TimeService/Time":        readers,
	"/time.TimeService/TimeCheck":   readers,
	"/storage.StorageService/Disks": readers,
	"/machine.ImageService/List":    readers,
	"/machine.ImageService/Pull":    operators,
	// The checks run with a certificate of the caller's roles.
	"/cluster.ClusterService/HealthCheck": readers,
	// Reads of sensitive resources (the machine config) need os:admin
	// as well (nodeState.server).
	cosiService + "Get":                 readers,
	cosiService + "List":                readers,
	cosiService + "Watch":               readers,
	svc + "Reboot":                      operators,
	svc + "Upgrade":                     admins,
	svc + "Reset":                       admins,
	svc + "ApplyConfiguration":          admins,
	svc + "Bootstrap":                   admins,
	svc + "EtcdLeaveCluster":            admins,
	svc + "EtcdRemoveMemberByID":        admins,
	svc + "EtcdForfeitLeadership":       admins,
	svc + "EtcdRecover":                 admins,
	svc + "Kubeconfig":                  admins,
	"/machine.LifecycleService/Upgrade": admins,
}

// RolesAllowed reports which roles may call a method (its full gRPC name);
// unknown methods need os:admin.
func RolesAllowed(fullMethod string) role.Set {
	if s, ok := methodRoles[fullMethod]; ok {
		return s
	}
	return admins
}

// admit runs before every call: the hang fault, the maintenance allow-list,
// then the caller's roles from its verified client certificate.
func (m *machineServer) admit(ctx context.Context, method string) error {
	m.n.mu.Lock()
	hang := m.n.st.Faults.Hang
	m.n.mu.Unlock()
	if hang {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	if m.maintenance {
		if !maintenanceMethods[method] {
			return status.Errorf(codes.Unimplemented, "%s is not available in maintenance mode", method)
		}
		return nil
	}
	roles, err := callerRoles(ctx)
	if err != nil {
		return err
	}
	if !roles.IncludesAny(RolesAllowed(method)) {
		return status.Errorf(codes.PermissionDenied, "roles %v may not call %s", roles.Strings(), method)
	}
	return nil
}

// callerRoles are the Talos roles in the caller's verified client certificate.
func callerRoles(ctx context.Context) (role.Set, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.Set{}, status.Error(codes.Unauthenticated, "no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return role.Set{}, status.Error(codes.Unauthenticated, "a client certificate signed by the OS CA is required")
	}
	roles, _ := role.Parse(ti.State.VerifiedChains[0][0].Subject.Organization)
	return roles, nil
}

func (m *machineServer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := m.admit(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (m *machineServer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := m.admit(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
