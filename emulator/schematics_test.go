package emulator

//lint:file-ignore SA1019 MachineService.Upgrade is what the upgrade saga calls (one call for install and reboot).

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestExtensionsFollowTheInstaller posts a schematic to the emulator's
// factory API, upgrades a node to its installer (refused while the
// catalogue lacks it, as a factory's registry refuses the pull) and reads
// the extensions through COSI as `talosctl get extensions` does; the
// catalogue and the node's image survive a restart of the emulator.
func TestExtensionsFollowTheInstaller(t *testing.T) {
	t.Parallel()
	// A state dir not made yet: the first schematic makes it.
	dir := filepath.Join(t.TempDir(), "state")
	em, stop := startEmulator(t, fastConfig(dir))
	srv := httptest.NewServer(em.Handler())
	t.Cleanup(srv.Close)
	cl := newTestCluster(t, "ext")
	st := configuredNode(t, em, "w-1", cl.controlPlane)
	c := connect(t, cl.admin, st.Address)

	iscsi := domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	image := domain.FactoryInstaller("http://factory.example", &iscsi, "v1.13.1")
	_, err := c.Upgrade(callCtx(t), image, false, false)
	requireCode(t, codes.NotFound, err)

	resp, err := http.Post(srv.URL+"/schematics", "application/yaml", strings.NewReader(string(iscsi.FactoryYAML())))
	require.NoError(t, err)
	var got struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, iscsi.ID(), got.ID)
	resp, err = http.Post(srv.URL+"/schematics", "application/json", strings.NewReader(`{"customization":{"systemExtensions":{"officialExtensions":["Bad Name"]}}}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)

	_, err = c.Upgrade(callCtx(t), image, false, false)
	require.NoError(t, err)
	extensions := func(ct *assert.CollectT) []string {
		list, err := safe.StateListAll[*runtime.ExtensionStatus](callCtx(t), c.COSI)
		if !assert.NoError(ct, err) {
			return nil
		}
		var out []string
		for r := range list.All() {
			out = append(out, r.TypedSpec().Metadata.Name+"="+r.TypedSpec().Metadata.Version)
		}
		return out
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, []string{"iscsi-tools=emulated", "schematic=" + iscsi.ID()}, extensions(ct))
	}, 15*time.Second, 20*time.Millisecond, "the node runs the schematic's extensions")
	require.Equal(t, image, mustGet(t, em, "w-1").Image)

	stop()
	em2, _ := startEmulator(t, fastConfig(dir))
	require.Equal(t, image, mustGet(t, em2, "w-1").Image, "the image is on disk")
	_, ok := em2.lookupSchematic(iscsi.ID())
	require.True(t, ok, "the catalogue is on disk")
}
