package upgrade

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// rotationCheck is what proves a node took a stage for one CA: the
// question asked, and who can answer it.
type rotationCheck int

const (
	// checkNone: nothing about this CA to prove at this stage.
	checkNone rotationCheck = iota
	// checkAcceptsNew: a client certificate from the new CA is accepted.
	checkAcceptsNew
	// checkServesNew: the serving certificate verifies against the new CA alone.
	checkServesNew
	// checkReady: the node answers a client of the new CA and is ready
	// (a kube-apiserver's /readyz), after the restart the stage's config
	// brought.
	checkReady
)

// decideRotationCheck says what proves that a node took stage for a CA
// that the rotation rotates (rotated) or not. Drop needs no proof of its
// own for what comes next (every machine already issues from the new CA,
// so a late node only accepts the old one a moment longer); it is asked
// to be ready, so that the next control plane restarts only then.
func decideRotationCheck(stage string, rotated bool) rotationCheck {
	switch {
	case !rotated:
		return checkNone
	case stage == domain.RotationAccept:
		return checkAcceptsNew
	case stage == domain.RotationSwap:
		return checkServesNew
	case stage == domain.RotationDrop:
		return checkReady
	}
	return checkNone
}

// awaitRotated waits, within the verify deadline, for the machine to show
// it took the stage: its Talos API healthy and, for each CA rotated, the
// node accepting the new CA (accept) or serving a certificate from it
// (swap) — on the Talos API, and on a control plane's kube-apiserver — and
// then, through Kubernetes, its API server and Node Ready on version. The
// next stage relies on it: credentials handed out after accept come from
// the new CA, and those after swap trust only the new CA.
func (r *upgradeRun) awaitRotated(ctx context.Context, m *domain.Machine, version string) string {
	stage := r.stage()
	what := fmt.Sprintf("%s to take stage %s", m.Metadata.Name, stage)
	return r.await(ctx, m.Metadata.Name, domain.StepVerifying, what, r.deadline("verify"), func(ctx context.Context) (bool, string, string) {
		p := r.nodes.health(ctx, m, "")
		if p == "" {
			p = r.rotationProblem(ctx, m, stage)
		}
		if p == "" {
			p = r.kubeVersionProblem(ctx, m, version)
		}
		return p == "", p, ""
	})
}

// rotationProblem asks the node the questions decideRotationCheck picks.
func (r *upgradeRun) rotationProblem(ctx context.Context, m *domain.Machine, stage string) string {
	rot := r.rotation
	if rot == nil {
		return ""
	}
	switch decideRotationCheck(stage, rot.Next.OS != nil) {
	case checkAcceptsNew:
		cert, err := issueTalosClient(rot.Next.OS)
		if err != nil {
			return err.Error()
		}
		probe := r.nodes.trusting(r.nodes.ca, cert)
		if _, err := probe.version(ctx, m); err != nil {
			return "its Talos API does not accept the new Talos CA yet: " + describeTalosErr(err)
		}
	case checkServesNew, checkReady:
		probe := r.nodes.trusting(rot.Next.OS.Crt, r.nodes.cert)
		if _, err := probe.version(ctx, m); err != nil {
			return "its Talos API does not serve a certificate of the new Talos CA yet: " + describeTalosErr(err)
		}
	}
	if m.Spec.Role != domain.RoleControlPlane || !r.hasKube(m) || m.Spec.Address == "" {
		return ""
	}
	check := decideRotationCheck(stage, rot.Next.Kubernetes != nil)
	if check == checkNone {
		return ""
	}
	d, err := r.desired(ctx)
	if err != nil {
		return err.Error()
	}
	addr, err := apiServerAt(d.Tenant(), m.Spec.Address)
	if err != nil {
		return err.Error()
	}
	b, err := r.s.cfg.Bundles.Bundle(ctx, r.ref.Tenant)
	if err != nil {
		return err.Error()
	}
	switch check {
	case checkAcceptsNew, checkReady:
		if err := kubeAccepts(ctx, addr, b.Certs.K8s.Crt, rot.Next.Kubernetes); err != nil {
			return "its kube-apiserver does not accept the new Kubernetes CA yet: " + err.Error()
		}
	case checkServesNew:
		if err := kubeAccepts(ctx, addr, rot.Next.Kubernetes.Crt, rot.Next.Kubernetes); err != nil {
			return "its kube-apiserver does not serve a certificate of the new Kubernetes CA yet: " + err.Error()
		}
	}
	return ""
}

// apiServerAt is host:port of the kube-apiserver on the control plane at
// address: the port of the tenant's endpoint.
func apiServerAt(t *domain.Tenant, address string) (string, error) {
	server, err := talos.ClusterEndpoint(t, address)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("the tenant's endpoint %q: %w", server, err)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(address, port), nil
}

// issueTalosClient is a short-lived os:reader certificate from ca.
func issueTalosClient(ca *x509.PEMEncodedCertificateAndKey) (*x509.PEMEncodedCertificateAndKey, error) {
	return secrets.NewAdminCertificateAndKey(time.Now(), ca, role.MakeSet(role.Reader), 10*time.Minute)
}

// kubeAccepts reads the default namespace and /readyz from the
// kube-apiserver at addr, trusting roots and authenticated by a
// system:masters certificate from ca: a 200 proves both that it serves a
// certificate roots verify and that it accepts clients of ca, and that it
// is ready.
func kubeAccepts(ctx context.Context, addr string, roots []byte, ca *x509.PEMEncodedCertificateAndKey) error {
	authority, err := x509.NewCertificateAuthorityFromCertificateAndKey(ca)
	if err != nil {
		return fmt.Errorf("loading the new Kubernetes CA: %w", err)
	}
	pair, err := x509.NewKeyPair(authority, x509.CommonName("rezuscloud-rotation-check"), x509.Organization(talos.KubernetesAdminGroup),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}), x509.NotAfter(time.Now().Add(10*time.Minute)))
	if err != nil {
		return err
	}
	pool := stdx509.NewCertPool()
	if !pool.AppendCertsFromPEM(roots) {
		return fmt.Errorf("no PEM certificate to trust")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*pair.Certificate}, MinVersion: tls.VersionTLS12},
	}}
	defer client.CloseIdleConnections()
	// /readyz too: a kube-apiserver that just restarted serves before its
	// caches are synced, and until then refuses what RBAC would allow
	// (system:masters alone passes); the next control plane waits for it.
	for _, path := range []string{"/api/v1/namespaces/default", "/readyz"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answers %s", path, resp.Status)
		}
	}
	return nil
}
