package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The autoscaler's manifest runs the externalgrpc provider on the files
// `rezusctl autoscaler config` writes, from the Secret the manifest's
// header makes, where the cloud-config says they are (rezusctl's default
// --mount-dir), with RBAC bound to its service account.
func TestDeployAutoscalerManifest(t *testing.T) {
	docs := manifestDocs(t, filepath.Join(deployDir, "autoscaler", "cluster-autoscaler.yaml"))
	byKind := map[string]map[string]any{}
	for _, d := range docs {
		byKind[d["kind"].(string)] = d
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Deployment"} {
		require.Contains(t, byKind, k)
	}
	sa := dig(byKind["ServiceAccount"], "metadata.name")
	for _, b := range []string{"ClusterRoleBinding", "RoleBinding"} {
		assert.Equal(t, sa, dig(byKind[b], "subjects.0.name"), b)
	}
	dep := byKind["Deployment"]
	assert.Equal(t, sa, dig(dep, "spec.template.spec.serviceAccountName"))
	c := dig(dep, "spec.template.spec.containers.0")
	var cmd []string
	for _, a := range dig(c, "command").([]any) {
		cmd = append(cmd, a.(string))
	}
	assert.Contains(t, cmd, "--cloud-provider=externalgrpc")
	const mountDir = "/etc/rezuscloud-autoscaler" // rezusctl autoscaler config's --mount-dir default
	assert.Contains(t, cmd, "--cloud-config="+mountDir+"/cloud-config")
	assert.Equal(t, mountDir, dig(c, "volumeMounts.0.mountPath"))
	vol := dig(c, "volumeMounts.0.name")
	assert.Equal(t, vol, dig(dep, "spec.template.spec.volumes.0.name"))
	assert.Equal(t, "rezuscloud-autoscaler", dig(dep, "spec.template.spec.volumes.0.secret.secretName"))
	// The autoscaler updates Nodes (its taints) and evicts pods before a scale-down.
	var verbs []string
	for _, r := range dig(byKind["ClusterRole"], "rules").([]any) {
		for _, res := range dig(r, "resources").([]any) {
			for _, v := range dig(r, "verbs").([]any) {
				verbs = append(verbs, res.(string)+":"+v.(string))
			}
		}
	}
	for _, want := range []string{"nodes:update", "pods/eviction:create", "pods:list", "poddisruptionbudgets:list"} {
		assert.True(t, slices.Contains(verbs, want), "%s in %s", want, strings.Join(verbs, " "))
	}
}
