package kubecp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFindBinaries(t *testing.T) {
	dir := t.TempDir()
	touch := func(rel string) {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	}

	_, err := FindBinaries(dir, "v1.36.1")
	require.ErrorContains(t, err, "run `go tool task tools`")
	require.ErrorContains(t, err, filepath.Join(dir, "etcd", EtcdVersion, "etcd"))

	touch("etcd/" + EtcdVersion + "/etcd")
	touch("etcd/" + EtcdVersion + "/etcdutl")
	for _, v := range []string{"1.36.1", "1.35.4"} {
		for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			touch("kube/" + v + "/" + b)
		}
	}
	touch("kube/1.37.0.tmp/kube-apiserver") // a build under way
	touch("kube/1.34.0/kube-apiserver")     // an incomplete one

	assert.Equal(t, []string{"v1.35.4", "v1.36.1"}, Available(dir))

	b, err := FindBinaries(dir, "1.36.1")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "kube", "1.36.1", "kube-apiserver"), b.APIServer)
	assert.Equal(t, filepath.Join(dir, "etcd", EtcdVersion, "etcdutl"), b.Etcdutl)
	assert.Equal(t, "v1.36.1", b.KubeVersion)
	assert.Equal(t, "v"+EtcdVersion, b.EtcdVersion)

	_, err = FindBinaries(dir, "v1.34.0")
	require.ErrorContains(t, err, filepath.Join(dir, "kube", "1.34.0", "kube-controller-manager"))
	require.ErrorContains(t, err, "built: v1.35.4, v1.36.1")
}
