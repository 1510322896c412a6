package kubecp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// EtcdVersion is the etcd hack/kube.sh builds (its ETCD_VERSION): the
// nearest served release to the etcd Talos v1.13 ships.
const EtcdVersion = "3.6.16"

// buildHint tells how to get the binaries.
const buildHint = "run `go tool task tools` (hack/kube.sh builds etcd and the Kubernetes control plane into the tools dir)"

// Binaries locates the built components of one Kubernetes version.
type Binaries struct {
	Etcd, Etcdutl                           string
	APIServer, ControllerManager, Scheduler string
	// EtcdVersion and KubeVersion are the versions they were found under,
	// with a leading "v" (v3.6.16, v1.36.1), for Processes.
	EtcdVersion, KubeVersion string
}

// FindBinaries locates etcd and the control plane of kubeVersion ("v1.36.1"
// or "1.36.1") under toolsDir, as hack/kube.sh lays them out:
// kube/<version>/{kube-apiserver,kube-controller-manager,kube-scheduler} and
// etcd/<EtcdVersion>/{etcd,etcdutl}. Its error names the first missing file.
func FindBinaries(toolsDir, kubeVersion string) (Binaries, error) {
	v := strings.TrimPrefix(kubeVersion, "v")
	if v == "" {
		return Binaries{}, errors.New("finding the control plane binaries: no Kubernetes version given")
	}
	kube := filepath.Join(toolsDir, "kube", v)
	etcd := filepath.Join(toolsDir, "etcd", EtcdVersion)
	b := Binaries{
		Etcd:              filepath.Join(etcd, "etcd"),
		Etcdutl:           filepath.Join(etcd, "etcdutl"),
		APIServer:         filepath.Join(kube, "kube-apiserver"),
		ControllerManager: filepath.Join(kube, "kube-controller-manager"),
		Scheduler:         filepath.Join(kube, "kube-scheduler"),
		EtcdVersion:       "v" + EtcdVersion,
		KubeVersion:       "v" + v,
	}
	for _, p := range []string{b.Etcd, b.Etcdutl, b.APIServer, b.ControllerManager, b.Scheduler} {
		if err := executable(p); err != nil {
			return Binaries{}, fmt.Errorf("kubernetes %s control plane: %w: %s (built: %s)",
				b.KubeVersion, err, buildHint, strings.Join(orNone(Available(toolsDir)), ", "))
		}
	}
	return b, nil
}

// Available returns the Kubernetes versions whose control plane is built
// under toolsDir ("v1.35.4", "v1.36.1"), oldest first, for a log line.
func Available(toolsDir string) []string {
	entries, err := os.ReadDir(filepath.Join(toolsDir, "kube"))
	if err != nil {
		return nil
	}
	var vs []*semver.Version
	for _, e := range entries {
		v, err := semver.StrictNewVersion(e.Name())
		if err != nil || !e.IsDir() { // skips kube.sh's <version>.tmp while it builds
			continue
		}
		dir := filepath.Join(toolsDir, "kube", e.Name())
		if executable(filepath.Join(dir, "kube-apiserver")) == nil &&
			executable(filepath.Join(dir, "kube-controller-manager")) == nil &&
			executable(filepath.Join(dir, "kube-scheduler")) == nil {
			vs = append(vs, v)
		}
	}
	slices.SortFunc(vs, func(a, b *semver.Version) int { return a.Compare(b) })
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = "v" + v.String()
	}
	return out
}

func executable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no %s", path)
	case err != nil:
		return err
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not an executable", path)
	}
	return nil
}

func orNone(vs []string) []string {
	if len(vs) == 0 {
		return []string{"none"}
	}
	return vs
}
