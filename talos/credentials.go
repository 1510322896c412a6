package talos

import (
	"context"
	stdx509 "crypto/x509"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/rezuscloud/rezuscloud/domain"
)

// CredentialTTL is how long a break-glass client certificate is valid
// (the global admin's kubeconfig --admin; in-process Talos clients).
const CredentialTTL = 365 * 24 * time.Hour

// KubernetesAdminGroup is the organisation of break-glass kubeconfig client
// certificates: Kubernetes binds it to cluster-admin, past RBAC.
const KubernetesAdminGroup = "system:masters"

// The groups of per-user Kubernetes credentials, by the user's RezusCloud
// role on the tenant; the bindings RezusCloud keeps in every cluster
// (kubeclient.EnsureAccessRBAC) give them cluster-admin, edit in the
// cluster's workload namespaces (and view elsewhere), and view.
const (
	KubeGroupAdmin = "rezuscloud:admin"
	KubeGroupEdit  = "rezuscloud:edit"
	KubeGroupView  = "rezuscloud:view"
)

// Bounds of per-user credentials (kubeconfig exec credentials, talosconfig).
const (
	DefaultUserCredentialTTL = time.Hour
	MaxUserCredentialTTL     = 24 * time.Hour
)

// KubeGroupFor is the Kubernetes group of a RezusCloud role on a tenant
// ("" for none: no credential).
func KubeGroupFor(r string) string {
	switch r {
	case domain.RoleAdmin:
		return KubeGroupAdmin
	case domain.RoleEdit:
		return KubeGroupEdit
	case domain.RoleView:
		return KubeGroupView
	}
	return ""
}

// IdPGroupPrefix starts the identity-provider groups a cluster certificate
// carries, as kube-apiserver's --oidc-groups-prefix would: a provider's
// group named "system:masters" or "rezuscloud:admin" must not pass for it.
const IdPGroupPrefix = "oidc:"

// KubeGroups are the groups (O) of a user's cluster certificate: the group
// of the user's role on the tenant, then the user's identity-provider
// groups with IdPGroupPrefix, for the cluster's own RBAC to bind.
func KubeGroups(role string, idpGroups []string) []string {
	out := []string{KubeGroupFor(role)}
	for _, g := range idpGroups {
		out = append(out, IdPGroupPrefix+g)
	}
	return out
}

// TalosRoleFor is the Talos API role of a RezusCloud role on a tenant
// (false for none). os:admin reads the machine config with every CA key and
// mints a year-long system:masters kubeconfig (Talos's Kubeconfig call), and
// os:operator takes etcd snapshots: what holds the tenant's secrets goes to
// global admins only (globalAdmin), so a tenant admin by binding and an
// editor get os:reader, as a viewer does (issue 42, finding 1).
func TalosRoleFor(r string, globalAdmin bool) (role.Role, bool) {
	switch r {
	case domain.RoleAdmin:
		if globalAdmin {
			return role.Admin, true
		}
		return role.Reader, true
	case domain.RoleEdit, domain.RoleView:
		return role.Reader, true
	}
	return "", false
}

// UserCredential is a client certificate issued to one user.
type UserCredential struct {
	Cert, Key []byte
	NotAfter  time.Time
}

// UserKubernetesCredential issues a client certificate of the tenant's
// Kubernetes CA for user (CN) in groups (O), valid for ttl.
func (s *Service) UserKubernetesCredential(ctx context.Context, tenant, user string, groups []string, ttl time.Duration) (*UserCredential, error) {
	if ttl <= 0 || ttl > MaxUserCredentialTTL {
		return nil, fmt.Errorf("a user credential's lifetime must be in (0, %s], not %s", MaxUserCredentialTTL, ttl)
	}
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	notAfter := v.bundle.Clock.Now().Add(ttl)
	cert, err := kubernetesClientCert(v.bundle, user, groups, ttl)
	if err != nil {
		return nil, err
	}
	return &UserCredential{Cert: cert.Crt, Key: cert.Key, NotAfter: notAfter}, nil
}

// ExecPlugin is the credential plugin a per-user kubeconfig runs
// (client.authentication.k8s.io/v1): rezusctl, asking RezusCloud.
type ExecPlugin struct {
	Command string
	Args    []string
	Env     map[string]string
}

// ExecKubeconfig is a tenant's kubeconfig for user whose credential comes
// from exec at each use: it holds no key.
func (s *Service) ExecKubeconfig(ctx context.Context, tenant, user string, exec ExecPlugin) ([]byte, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	server, err := ClusterEndpoint(v.tenant, v.firstControlPlane())
	if err != nil {
		return nil, err
	}
	return execKubeconfig(v.bundle.Certs.K8s.Crt, tenant, server, user, exec), nil
}

func execKubeconfig(ca []byte, clusterName, server, user string, exec ExecPlugin) []byte {
	name := user + "@" + clusterName
	enc := base64.StdEncoding.EncodeToString
	var sb strings.Builder
	fmt.Fprintf(&sb, "apiVersion: v1\nkind: Config\nclusters:\n- name: %q\n  cluster:\n    server: %q\n    certificate-authority-data: %s\n",
		clusterName, server, enc(ca))
	fmt.Fprintf(&sb, "users:\n- name: %q\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: %q\n", name, exec.Command)
	if len(exec.Args) > 0 {
		sb.WriteString("      args:\n")
		for _, a := range exec.Args {
			fmt.Fprintf(&sb, "      - %q\n", a)
		}
	}
	if len(exec.Env) > 0 {
		sb.WriteString("      env:\n")
		keys := make([]string, 0, len(exec.Env))
		for k := range exec.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&sb, "      - name: %q\n        value: %q\n", k, exec.Env[k])
		}
	}
	sb.WriteString("      interactiveMode: Never\n      provideClusterInfo: false\n")
	fmt.Fprintf(&sb, "contexts:\n- name: %q\n  context:\n    cluster: %q\n    namespace: default\n    user: %q\ncurrent-context: %q\n",
		name, clusterName, name, name)
	return []byte(sb.String())
}

// UserTalosconfig is a tenant's talosconfig with a client certificate of
// Talos role r, valid for ttl.
func (s *Service) UserTalosconfig(ctx context.Context, tenant string, r role.Role, ttl time.Duration) ([]byte, time.Time, error) {
	if ttl <= 0 || ttl > MaxUserCredentialTTL {
		return nil, time.Time{}, fmt.Errorf("a user credential's lifetime must be in (0, %s], not %s", MaxUserCredentialTTL, ttl)
	}
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, time.Time{}, err
	}
	notAfter := v.bundle.Clock.Now().Add(ttl)
	cert, err := v.bundle.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(r), ttl)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("issuing the talos client certificate: %w", err)
	}
	b, err := clientconfig.NewConfig(tenant, v.controlPlaneAddresses(), v.bundle.Certs.OS.Crt, cert).Bytes()
	return b, notAfter, err
}

// Talosconfig builds a talosconfig with a client certificate from the tenant's
// OS CA with role os:admin, reaching the given Talos API endpoints.
func Talosconfig(b *secrets.Bundle, contextName string, endpoints []string) ([]byte, error) {
	cert, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), CredentialTTL)
	if err != nil {
		return nil, fmt.Errorf("issuing the talos client certificate: %w", err)
	}
	return clientconfig.NewConfig(contextName, endpoints, b.Certs.OS.Crt, cert).Bytes()
}

// Kubeconfig builds a kubeconfig with a client certificate from the tenant's
// Kubernetes CA in system:masters, reaching the API server at server.
func Kubeconfig(b *secrets.Bundle, clusterName, server string) ([]byte, error) {
	cert, err := kubernetesClientCert(b, "admin", []string{KubernetesAdminGroup}, CredentialTTL)
	if err != nil {
		return nil, err
	}
	user := "admin@" + clusterName
	enc := base64.StdEncoding.EncodeToString
	// Every value is base64, a DNS-1123 name or a URL, so a template needs no YAML library.
	var sb strings.Builder
	fmt.Fprintf(&sb, "apiVersion: v1\nkind: Config\nclusters:\n- name: %q\n  cluster:\n    server: %q\n    certificate-authority-data: %s\n",
		clusterName, server, enc(b.Certs.K8s.Crt))
	fmt.Fprintf(&sb, "users:\n- name: %q\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n",
		user, enc(cert.Crt), enc(cert.Key))
	fmt.Fprintf(&sb, "contexts:\n- name: %q\n  context:\n    cluster: %q\n    namespace: default\n    user: %q\ncurrent-context: %q\n",
		user, clusterName, user, user)
	return []byte(sb.String()), nil
}

// Talosconfig returns a tenant's talosconfig, its endpoints the addresses of
// the control-plane machines.
func (s *Service) Talosconfig(ctx context.Context, tenant string) ([]byte, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return Talosconfig(v.bundle, tenant, v.controlPlaneAddresses())
}

// Kubeconfig returns a tenant's admin kubeconfig for its control-plane endpoint.
func (s *Service) Kubeconfig(ctx context.Context, tenant string) ([]byte, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	server, err := ClusterEndpoint(v.tenant, v.firstControlPlane())
	if err != nil {
		return nil, err
	}
	return Kubeconfig(v.bundle, tenant, server)
}

// ControllerCredentials is what a RezusCloud controller needs to reach a
// tenant's Kubernetes API: the endpoint, the cluster's CA, and a short-lived
// client certificate (CN rezuscloud-controller, in system:masters) that
// never leaves the process.
type ControllerCredentials struct {
	Server      string
	CA          []byte
	Cert, Key   []byte
	NotAfter    time.Time
	ClusterName string
}

// ControllerCredentialTTL is how long a controller's client certificate is
// valid; kubeclient issues a new one well before it ends.
const ControllerCredentialTTL = time.Hour

// ControllerCredentials issues the credentials a controller uses to reach
// the tenant's Kubernetes API (kube/kubeclient caches a client on them).
func (s *Service) ControllerCredentials(ctx context.Context, tenant string) (*ControllerCredentials, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	server, err := ClusterEndpoint(v.tenant, v.firstControlPlane())
	if err != nil {
		return nil, err
	}
	notAfter := v.bundle.Clock.Now().Add(ControllerCredentialTTL)
	cert, err := kubernetesClientCert(v.bundle, "rezuscloud-controller", []string{KubernetesAdminGroup}, ControllerCredentialTTL)
	if err != nil {
		return nil, err
	}
	return &ControllerCredentials{Server: server, CA: v.bundle.Certs.K8s.Crt, Cert: cert.Crt, Key: cert.Key,
		NotAfter: notAfter, ClusterName: tenant}, nil
}

// kubernetesClientCert issues a client certificate from the tenant's
// Kubernetes CA for cn in the groups orgs, valid for ttl.
func kubernetesClientCert(b *secrets.Bundle, cn string, orgs []string, ttl time.Duration) (*x509.PEMEncodedCertificateAndKey, error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(b.Certs.K8s)
	if err != nil {
		return nil, fmt.Errorf("loading the kubernetes ca: %w", err)
	}
	now := b.Clock.Now()
	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(cn),
		x509.Organization(orgs...),
		x509.NotBefore(now.Add(-time.Minute)), // tolerate clocks slightly behind
		x509.NotAfter(now.Add(ttl)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("issuing the kubernetes client certificate: %w", err)
	}
	return x509.NewCertificateAndKeyFromKeyPair(kp), nil
}
