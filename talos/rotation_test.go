package talos_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestRotationStages walks a Kubernetes and Talos CA rotation through its
// stages on real sealed storage and checks what configs and clients get at
// each: the accepted CAs, which CA issues, and that the end folds the new
// material into the stored bundle.
func TestRotationStages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := eventstoretest.Start(t)
	cache := projections.NewCache(env.Store, nil)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed})
	_, err = env.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef("acme"),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: []byte(`{}`)},
		Actor:  "test", Now: time.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, cache.Sync(ctx))

	old, err := pki.Bundle(ctx, "acme")
	require.NoError(t, err)
	secretsToRotate := []string{domain.SecretTalosCA, domain.SecretKubernetesCA, domain.SecretBootstrapToken}
	r, err := pki.StartRotation(ctx, "acme", "rot1", secretsToRotate)
	require.NoError(t, err)
	require.Equal(t, domain.RotationAccept, r.Stage)
	again, err := pki.StartRotation(ctx, "acme", "rot2", secretsToRotate)
	require.NoError(t, err)
	require.Equal(t, r.Next.Kubernetes.Crt, again.Next.Kubernetes.Crt, "a second start takes up the rotation under way")
	_, err = pki.StartRotation(ctx, "acme", "rot3", []string{domain.SecretAggregatorCA})
	require.True(t, domain.IsConflict(err), "another rotation while one is under way: %v", err)

	render := func() *configloaderProvider {
		b, err := pki.Bundle(ctx, "acme")
		require.NoError(t, err)
		cfg, err := talos.Render(talos.RenderInput{Tenant: &domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: domain.TenantSpec{TalosVersion: domain.DefaultTalosVersion, KubernetesVersion: "v1.33.1"}},
			NodeGroup: &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "cp"}, Spec: domain.NodeGroupSpec{Role: domain.RoleControlPlane}}, ControlPlaneAddress: "10.5.0.2", Bundle: b})
		require.NoError(t, err)
		p, err := configloader.NewFromBytes(cfg)
		require.NoError(t, err)
		return &configloaderProvider{issuingOS: p.Machine().Security().IssuingCA().Crt, acceptedOS: len(p.Machine().Security().AcceptedCAs()),
			issuingK8s: p.Cluster().IssuingCA().Crt, acceptedK8s: p.Cluster().AcceptedCAs(), token: p.Cluster().Token().Secret()}
	}
	// accept: the old CAs issue, the new ones are accepted; clients trust both.
	c := render()
	require.Equal(t, old.Certs.K8s.Crt, c.issuingK8s)
	require.Len(t, c.acceptedK8s, 1)
	require.Equal(t, r.Next.Kubernetes.Crt, c.acceptedK8s[0].Crt)
	require.Equal(t, 1, c.acceptedOS)
	b, err := pki.Bundle(ctx, "acme")
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b.Certs.K8s.Crt, bytes.TrimSpace(old.Certs.K8s.Crt)), "the issuing CA comes first")
	require.True(t, bytes.Contains(b.Certs.K8s.Crt, bytes.TrimSpace(r.Next.Kubernetes.Crt)), "clients trust the accepted CA")
	_, err = talos.Kubeconfig(b, "acme", "https://10.5.0.2:6443")
	require.NoError(t, err, "a trust bundle still signs with the issuing CA")

	// swap: the new CAs and token issue, the old CAs are accepted.
	require.NoError(t, pki.SetRotationStage(ctx, "acme", domain.RotationSwap))
	c = render()
	require.Equal(t, r.Next.Kubernetes.Crt, c.issuingK8s)
	require.Equal(t, old.Certs.K8s.Crt, c.acceptedK8s[0].Crt)
	require.NotEqual(t, old.Secrets.BootstrapToken, c.token)

	// drop: only the new CAs.
	require.NoError(t, pki.SetRotationStage(ctx, "acme", domain.RotationDrop))
	c = render()
	require.Equal(t, r.Next.Kubernetes.Crt, c.issuingK8s)
	require.Empty(t, c.acceptedK8s)
	require.Zero(t, c.acceptedOS)

	require.NoError(t, pki.FinishRotation(ctx, "acme"))
	require.NoError(t, pki.FinishRotation(ctx, "acme"), "finishing twice changes nothing")
	after, err := pki.Bundle(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, r.Next.Kubernetes.Crt, after.Certs.K8s.Crt)
	require.Equal(t, r.Next.OS.Crt, after.Certs.OS.Crt)
	require.Equal(t, old.Certs.K8sAggregator.Crt, after.Certs.K8sAggregator.Crt, "what was not rotated stays")
	require.Equal(t, old.Certs.Etcd.Crt, after.Certs.Etcd.Crt)
	rot, err := pki.Rotation(ctx, "acme")
	require.NoError(t, err)
	require.Nil(t, rot)
}

type configloaderProvider struct {
	issuingOS, issuingK8s []byte
	acceptedOS            int
	acceptedK8s           []*x509.PEMEncodedCertificate
	token                 string
}

// TestRotationRecordV1Reads: the rotation record as release 0.3 writes it
// (testdata/rotation-v1.json, a throwaway one at stage swap, beside the
// bundle it rotates) reads back and applies: the new CAs and token issue,
// the old CAs are accepted.
func TestRotationRecordV1Reads(t *testing.T) {
	raw, err := os.ReadFile("testdata/rotation-v1.json")
	require.NoError(t, err)
	r, err := talos.DecodeRotation(raw)
	require.NoError(t, err)
	require.Equal(t, domain.RotationSwap, r.Stage)
	braw, err := os.ReadFile("testdata/rotation-v1-bundle.json")
	require.NoError(t, err)
	b, err := talos.DecodeBundle(braw)
	require.NoError(t, err)
	nb, acc := r.Apply(b)
	require.Equal(t, r.Next.Kubernetes.Crt, nb.Certs.K8s.Crt)
	require.Equal(t, r.Next.OS.Crt, nb.Certs.OS.Crt)
	require.Equal(t, r.Next.Aggregator.Crt, nb.Certs.K8sAggregator.Crt)
	require.Equal(t, r.Next.BootstrapToken, nb.Secrets.BootstrapToken)
	require.Equal(t, b.Certs.K8s.Crt, acc.Kubernetes[0].Crt)
	require.Equal(t, b.Certs.OS.Crt, acc.OS[0].Crt)
	require.NoError(t, nb.Validate())

	_, err = talos.DecodeRotation([]byte(`{"version":2,"stage":"swap"}`))
	require.ErrorContains(t, err, "newer than this release reads")
}
