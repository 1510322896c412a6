package talos

import (
	"context"
	stdx509 "crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// CredentialTTL is how long a downloaded client certificate is valid.
const CredentialTTL = 365 * 24 * time.Hour

// KubernetesAdminGroup is the organisation of kubeconfig client certificates:
// Kubernetes binds it to cluster-admin.
const KubernetesAdminGroup = "system:masters"

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
	cert, err := kubernetesClientCert(b, "admin", CredentialTTL)
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
// the tenant's Kubernetes API (talos/kubeclient caches a client on them).
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
	cert, err := kubernetesClientCert(v.bundle, "rezuscloud-controller", ControllerCredentialTTL)
	if err != nil {
		return nil, err
	}
	return &ControllerCredentials{Server: server, CA: v.bundle.Certs.K8s.Crt, Cert: cert.Crt, Key: cert.Key,
		NotAfter: notAfter, ClusterName: tenant}, nil
}

// kubernetesClientCert issues a client certificate from the tenant's
// Kubernetes CA in system:masters for cn, valid for ttl.
func kubernetesClientCert(b *secrets.Bundle, cn string, ttl time.Duration) (*x509.PEMEncodedCertificateAndKey, error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(b.Certs.K8s)
	if err != nil {
		return nil, fmt.Errorf("loading the kubernetes ca: %w", err)
	}
	now := b.Clock.Now()
	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(cn),
		x509.Organization(KubernetesAdminGroup),
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
