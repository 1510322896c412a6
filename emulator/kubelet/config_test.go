package kubelet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
)

func TestNewValidatesConfig(t *testing.T) {
	_, err := New(Config{Address: "not-an-ip", StaticPods: []StaticPod{{Name: "kube-apiserver"}}})
	require.Error(t, err)
	for _, want := range []string{"node name is required", `address "not-an-ip" is not an IP`, "client is required", "kubelet version is required", "static pod 0 needs a name and an image"} {
		assert.ErrorContains(t, err, want)
	}
}

func TestConfigDefaults(t *testing.T) {
	k, err := New(Config{
		NodeName: "w1", Address: "10.5.0.2", Client: &kubernetes.Clientset{}, Version: "v1.36.1",
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")},
	})
	require.NoError(t, err)
	cfg := k.cfg
	assert.True(t, resource.MustParse("16").Equal(cfg.Capacity[corev1.ResourceCPU]), "a given capacity wins")
	assert.True(t, resource.MustParse("8Gi").Equal(cfg.Capacity[corev1.ResourceMemory]), "a missing one defaults")
	assert.Equal(t, DefaultOSImage, cfg.OSImage)
	assert.Equal(t, 40*time.Second, cfg.LeaseDuration)
	assert.Equal(t, 2*time.Second, cfg.MaxGrace)
	assert.Len(t, cfg.MachineID, 32)

	other, err := New(Config{NodeName: "w1", Address: "10.5.0.2", Client: &kubernetes.Clientset{}, Version: "v1.36.1"})
	require.NoError(t, err)
	assert.Equal(t, cfg.MachineID, other.cfg.MachineID, "a machine keeps its ID across boots")
	assert.Equal(t, cfg.SystemUUID, other.cfg.SystemUUID)
	assert.NotEqual(t, cfg.BootID, other.cfg.BootID, "each boot is new")
}
