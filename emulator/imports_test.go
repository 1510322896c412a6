package emulator

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImports keeps the emulator a leaf beside domain, etcd's snapshot
// format (talos/etcdsnapshot, itself a leaf) and its own real-Kubernetes
// parts (kubecp, kubelet: leaves too): it must not import the event store,
// projections, handlers or the rest of talos, so any of them (and rezusctl)
// can use it.
func TestImports(t *testing.T) {
	const module = "github.com/rezuscloud/rezuscloud/"
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				require.Contains(t, []string{module + "domain", module + "talos/etcdsnapshot",
					module + "emulator/kubecp", module + "emulator/kubelet"}, path, "%s imports %s", e.Name(), path)
			}
		}
	}
}
