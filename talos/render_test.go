package talos_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

var update = flag.Bool("update", false, "rewrite the golden files and fixed bundles in testdata")

// issued is the fixed time of the test bundles and certificates.
var issued = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fixedBundle loads the test bundle of a Talos version from testdata (written
// with -update), so golden configs do not change from run to run.
func fixedBundle(t *testing.T, version string) *secrets.Bundle {
	t.Helper()
	path := filepath.Join("testdata", "bundle-"+version+".json")
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) && *update {
		b, err := talos.NewBundle(version, issued)
		require.NoError(t, err)
		raw, err = json.MarshalIndent(b, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, raw, 0o644))
	} else {
		require.NoError(t, err, "run go test ./talos/ -update to create it")
	}
	b, err := talos.DecodeBundle(raw)
	require.NoError(t, err)
	b.Clock = secrets.NewFixedClock(issued)
	return b
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./talos/ -update to create it")
	require.Equal(t, string(want), string(got), "golden file %s; run go test ./talos/ -update after checking the change", path)
}

func boolp(b bool) *bool { return &b }

func tenant(version string) *domain.Tenant {
	t := &domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: domain.TenantSpec{TalosVersion: version}}
	t.Spec.Network.PodSubnets = []string{"10.200.0.0/16"}
	t.Spec.Default()
	return t
}

func nodeGroups() (*domain.NodeGroup, *domain.NodeGroup) {
	cp := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "cp", Tenant: "acme"},
		Spec: domain.NodeGroupSpec{Role: domain.RoleControlPlane, Count: 1, Provider: "emu"}}
	workers := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "workers", Tenant: "acme"},
		Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 2, Provider: "emu",
			ProviderConfig: json.RawMessage(`{"installDisk":"/dev/vda","installImage":"ghcr.io/siderolabs/installer:v1.12.6","shape":"small"}`),
			Labels:         map[string]string{"tier": "batch"},
			Taints:         []domain.Taint{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}}}}
	return cp, workers
}

func patch(name string, weight int, target domain.PatchTarget, format, text string, enabled bool) domain.ConfigPatch {
	return domain.ConfigPatch{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"},
		Spec: domain.ConfigPatchSpec{Target: target, Format: format, Patch: text, Weight: weight, Enabled: boolp(enabled)}}
}

func patches() []domain.ConfigPatch {
	all := domain.PatchTarget{Kind: domain.TargetAll}
	return []domain.ConfigPatch{
		patch("ntp-b", 20, all, domain.PatchStrategic, "machine:\n  time:\n    servers: [time.b.example]\n", true),
		patch("ntp-a", 10, all, domain.PatchStrategic, "machine:\n  time:\n    servers: [time.a.example]\n", true),
		patch("workers-sysctl", 0, domain.PatchTarget{Kind: domain.TargetRole, Name: domain.RoleWorker}, domain.PatchJSON6902,
			`[{"op":"add","path":"/machine/sysctls","value":{"vm.max_map_count":"262144"}}]`, true),
		patch("cp-only", 0, domain.PatchTarget{Kind: domain.TargetNodeGroup, Name: "cp"}, domain.PatchStrategic,
			"cluster:\n  allowSchedulingOnControlPlanes: true\n", true),
		patch("w1-kubelet", 0, domain.PatchTarget{Kind: domain.TargetMachine, Name: "w1"}, domain.PatchJSON6902,
			"- op: add\n  path: /machine/kubelet/extraArgs\n  value:\n    max-pods: \"150\"\n", true),
		patch("disabled", 0, all, domain.PatchStrategic, "machine:\n  env:\n    DISABLED: \"yes\"\n", false),
	}
}

func TestRenderGolden(t *testing.T) {
	for _, version := range []string{"v1.12.0", "v1.13.0"} {
		t.Run(version, func(t *testing.T) {
			b := fixedBundle(t, version)
			cp, workers := nodeGroups()
			cpm := &domain.Machine{Metadata: domain.ObjectMeta{Name: "cp1", Tenant: "acme"}, Spec: domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: "10.0.0.10"}}
			w1 := &domain.Machine{Metadata: domain.ObjectMeta{Name: "w1", Tenant: "acme"}, Spec: domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker, Address: "10.0.0.21"}}
			for _, tc := range []struct {
				file string
				in   talos.RenderInput
			}{
				{"controlplane.yaml", talos.RenderInput{Tenant: tenant(version), NodeGroup: cp, Machine: cpm, ControlPlaneAddress: "10.0.0.10", Patches: patches(), Bundle: b}},
				{"worker-w1.yaml", talos.RenderInput{Tenant: tenant(version), NodeGroup: workers, Machine: w1, ControlPlaneAddress: "10.0.0.10", Patches: patches(), Bundle: b}},
				{"worker-template.yaml", talos.RenderInput{Tenant: tenant(version), NodeGroup: workers, ControlPlaneAddress: "10.0.0.10", Patches: patches(), Bundle: b}},
			} {
				t.Run(tc.file, func(t *testing.T) {
					got, err := talos.Render(tc.in)
					require.NoError(t, err)
					again, err := talos.Render(tc.in)
					require.NoError(t, err)
					require.Equal(t, string(got), string(again), "rendering is deterministic")
					golden(t, filepath.Join(version, tc.file), got)

					cfg, err := configloader.NewFromBytes(got)
					require.NoError(t, err)
					require.Equal(t, "https://10.0.0.10:6443", cfg.Cluster().Endpoint().String())
					// Strategic merge appends lists: weight order shows in the list's order.
					a, b := strings.Index(string(got), "time.a.example"), strings.Index(string(got), "time.b.example")
					require.True(t, a >= 0 && a < b, "ntp-a (weight 10) before ntp-b (weight 20)")
					require.Equal(t, "acme", cfg.Cluster().Name())
					require.Equal(t, []string{"10.200.0.0/16"}, cfg.Cluster().Network().PodCIDRs())
					require.NotContains(t, string(got), "DISABLED")
					switch tc.file {
					case "controlplane.yaml":
						require.Contains(t, string(got), "allowSchedulingOnControlPlanes: true")
						require.Equal(t, "/dev/sda", cfg.Machine().Install().Disk())
						require.Equal(t, domain.DefaultInstallImage(version), cfg.Machine().Install().Image())
						require.NotContains(t, string(got), "vm.max_map_count")
					case "worker-w1.yaml", "worker-template.yaml":
						require.Equal(t, "/dev/vda", cfg.Machine().Install().Disk())
						require.EqualValues(t, map[string]string{"tier": "batch"}, cfg.Machine().NodeLabels())
						require.EqualValues(t, map[string]string{"dedicated": "batch:NoSchedule"}, cfg.Machine().NodeTaints())
						require.Equal(t, "262144", cfg.Machine().Sysctls()["vm.max_map_count"])
						require.Equal(t, tc.file == "worker-w1.yaml", strings.Contains(string(got), "max-pods"))
					}
				})
			}
		})
	}
}

func TestRenderVersionOverride(t *testing.T) {
	b := fixedBundle(t, "v1.12.0")
	_, workers := nodeGroups()
	workers.Spec.TalosVersion = "v1.12.0"
	workers.Spec.ProviderConfig = nil
	in := talos.RenderInput{Tenant: tenant("v1.13.0"), NodeGroup: workers, ControlPlaneAddress: "fd00::1", Bundle: b}
	require.Equal(t, "v1.12.0", in.TalosVersion())
	got, err := talos.Render(in)
	require.NoError(t, err)
	cfg, err := configloader.NewFromBytes(got)
	require.NoError(t, err)
	require.Equal(t, domain.DefaultInstallImage("v1.12.0"), cfg.Machine().Install().Image())
	require.Equal(t, "https://[fd00::1]:6443", cfg.Cluster().Endpoint().String())
}

func TestRenderBadPatches(t *testing.T) {
	b := fixedBundle(t, "v1.13.0")
	_, workers := nodeGroups()
	all := domain.PatchTarget{Kind: domain.TargetAll}
	for _, tc := range []struct {
		name string
		p    domain.ConfigPatch
		want string
	}{
		{"unknown field", patch("bad", 0, all, domain.PatchStrategic, "machine:\n  notAField: 1\n", true), "notAField"},
		{"not yaml", patch("bad", 0, all, domain.PatchStrategic, "machine: [\n", true), ""},
		{"json6902 on a missing path", patch("bad", 0, all, domain.PatchJSON6902, `[{"op":"replace","path":"/machine/nope/x","value":1}]`, true), ""},
		{"format mismatch", patch("bad", 0, all, domain.PatchJSON6902, "machine:\n  env:\n    A: b\n", true), "format is json6902"},
		{"invalid result", patch("bad", 0, all, domain.PatchStrategic, "machine:\n  type: banana\n", true), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := talos.Render(talos.RenderInput{Tenant: tenant("v1.13.0"), NodeGroup: workers, ControlPlaneAddress: "10.0.0.10",
				Patches: []domain.ConfigPatch{tc.p}, Bundle: b})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			t.Log(err)
		})
	}
}

func TestNoEndpoint(t *testing.T) {
	b := fixedBundle(t, "v1.13.0")
	cp, _ := nodeGroups()
	_, err := talos.Render(talos.RenderInput{Tenant: tenant("v1.13.0"), NodeGroup: cp, Bundle: b})
	require.True(t, domain.IsConflict(err), "%v", err)
	ten := tenant("v1.13.0")
	ten.Spec.ControlPlane.Endpoint = "https://api.acme.example:6443"
	got, err := talos.Render(talos.RenderInput{Tenant: ten, NodeGroup: cp, Bundle: b})
	require.NoError(t, err)
	require.Contains(t, string(got), "https://api.acme.example:6443")
}

func TestSelectPatches(t *testing.T) {
	got := talos.SelectPatches(patches(), domain.RoleWorker, "workers", "w1")
	var names []string
	for _, p := range got {
		names = append(names, p.Metadata.Name)
	}
	require.Equal(t, []string{"w1-kubelet", "workers-sysctl", "ntp-a", "ntp-b"}, names)
	got = talos.SelectPatches(patches(), domain.RoleControlPlane, "cp", "")
	names = nil
	for _, p := range got {
		names = append(names, p.Metadata.Name)
	}
	require.Equal(t, []string{"cp-only", "ntp-a", "ntp-b"}, names)
}

// certOf decodes the first certificate of a PEM block.
func certOf(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(pemBytes)
	require.NotNil(t, blk)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

// VerifyClientCert checks a client certificate against a CA in PEM.
func verifyClient(t *testing.T, caPEM, certPEM []byte) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	c := certOf(t, certPEM)
	_, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: issued.Add(time.Hour)})
	require.NoError(t, err)
	return c
}

func TestCredentialChains(t *testing.T) {
	b := fixedBundle(t, "v1.13.0")
	cp, _ := nodeGroups()
	rendered, err := talos.Render(talos.RenderInput{Tenant: tenant("v1.13.0"), NodeGroup: cp, ControlPlaneAddress: "10.0.0.10", Bundle: b})
	require.NoError(t, err)
	cfg, err := configloader.NewFromBytes(rendered)
	require.NoError(t, err)

	kc, err := talos.Kubeconfig(b, "acme", "https://10.0.0.10:6443")
	require.NoError(t, err)
	crt := kubeconfigField(t, kc, "client-certificate-data")
	c := verifyClient(t, cfg.Cluster().IssuingCA().Crt, crt)
	require.Equal(t, []string{talos.KubernetesAdminGroup}, c.Subject.Organization)

	tc, err := talos.Talosconfig(b, "acme", []string{"10.0.0.10"})
	require.NoError(t, err)
	tcrt := talosconfigCert(t, tc)
	c = verifyClient(t, cfg.Machine().Security().IssuingCA().Crt, tcrt)
	require.Equal(t, []string{"os:admin"}, c.Subject.Organization)
}

func kubeconfigField(t *testing.T, kc []byte, field string) []byte {
	t.Helper()
	for _, line := range strings.Split(string(kc), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+": "); ok {
			raw, err := base64.StdEncoding.DecodeString(v)
			require.NoError(t, err)
			return raw
		}
	}
	t.Fatalf("no %s in kubeconfig", field)
	return nil
}

func talosconfigCert(t *testing.T, tc []byte) []byte {
	t.Helper()
	for _, line := range strings.Split(string(tc), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "crt: "); ok {
			raw, err := base64.StdEncoding.DecodeString(v)
			require.NoError(t, err)
			return raw
		}
	}
	t.Fatalf("no crt in talosconfig")
	return nil
}

func TestUnifiedDiff(t *testing.T) {
	require.Empty(t, talos.UnifiedDiff("a", "b", "x\ny\n", "x\ny\n"))
	d := talos.UnifiedDiff("a", "b", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n")
	require.Equal(t, "--- a\n+++ b\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n", d)
	d = talos.UnifiedDiff("a", "b", "", "new\n")
	require.Equal(t, "--- a\n+++ b\n@@ -0,0 +1,1 @@\n+new\n", d)
}

func TestRenderHostnameAndKubernetesVersion(t *testing.T) {
	for _, version := range []string{"v1.12.0", "v1.13.0"} {
		t.Run(version, func(t *testing.T) {
			b := fixedBundle(t, version)
			cp, _ := nodeGroups()
			m := &domain.Machine{Metadata: domain.ObjectMeta{Name: "cp1", Tenant: "acme"},
				Spec: domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: "10.0.0.10", Hostname: "acme-cp1"}}
			ten := tenant(version)
			ten.Spec.KubernetesVersion = "v1.35.2"
			in := talos.RenderInput{Tenant: ten, NodeGroup: cp, Machine: m, ControlPlaneAddress: "10.0.0.10", Bundle: b}

			// The version machines were last moved to wins over the declared one.
			ten.Status.KubernetesVersion = "v1.35.0"
			got, err := talos.Render(in)
			require.NoError(t, err)
			cfg, err := configloader.NewFromBytes(got)
			require.NoError(t, err)
			require.Equal(t, "acme-cp1", cfg.NetworkHostnameConfig().Hostname())
			require.Contains(t, cfg.Machine().Kubelet().Image(), ":v1.35.0")
			require.Contains(t, cfg.Cluster().APIServer().Image(), ":v1.35.0")

			// An explicit version (an upgrade run's next config) wins over both.
			in.KubernetesVersion = "v1.35.2"
			got2, err := talos.Render(in)
			require.NoError(t, err)
			cfg, err = configloader.NewFromBytes(got2)
			require.NoError(t, err)
			require.Contains(t, cfg.Machine().Kubelet().Image(), ":v1.35.2")
			require.Contains(t, cfg.Cluster().Scheduler().Image(), ":v1.35.2")
			require.NotEqual(t, talos.ConfigHash(got), talos.ConfigHash(got2))
			require.Len(t, talos.ConfigHash(got), 64)

			// Without a hostname the automatic one stays.
			m.Spec.Hostname = ""
			in.KubernetesVersion = ""
			got3, err := talos.Render(in)
			require.NoError(t, err)
			require.NotContains(t, string(got3), "acme-cp1")
		})
	}
}

// A machine of an autoscaled group registers its Node with the provider
// ID the autoscaler service lists it under; a fixed group's does not, and
// the group's template (no machine) has none to give.
func TestRenderAutoscaledProviderID(t *testing.T) {
	b := fixedBundle(t, "v1.13.0")
	_, workers := nodeGroups()
	workers.Spec.ProviderConfig = nil
	w1 := &domain.Machine{Metadata: domain.ObjectMeta{Name: "workers-1", Tenant: "acme"}, Spec: domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker}}
	providerID := func(ng *domain.NodeGroup, m *domain.Machine) string {
		got, err := talos.Render(talos.RenderInput{Tenant: tenant("v1.13.0"), NodeGroup: ng, Machine: m, ControlPlaneAddress: "10.0.0.10", Bundle: b})
		require.NoError(t, err)
		cfg, err := configloader.NewFromBytes(got)
		require.NoError(t, err)
		return strings.Join(cfg.Machine().Kubelet().ExtraArgs()["provider-id"], ",")
	}
	require.Empty(t, providerID(workers, w1))
	workers.Spec.Autoscaling = &domain.Autoscaling{MinCount: 1, MaxCount: 3}
	require.Equal(t, "rezuscloud://acme/workers-1", providerID(workers, w1))
	require.Empty(t, providerID(workers, nil))
}
