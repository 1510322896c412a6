package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
)

// wireStatus is the part of GET /v1/nodes/{name} a management plane reads to
// know what a node holds, decoded by its JSON names.
type wireStatus struct {
	Phase             Phase  `json:"phase"`
	ConfigHash        string `json:"configHash"`
	KubernetesVersion string `json:"kubernetesVersion"`
	StagedConfigHash  string `json:"stagedConfigHash"`
	EtcdLeft          bool   `json:"etcdLeft"`
}

// fetchStatus reads one node through the HTTP API.
func fetchStatus(base, name string) (wireStatus, error) {
	var st wireStatus
	resp, err := http.Get(base + "/v1/nodes/" + name)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s", name, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func httpStatus(t *testing.T, base, name string) wireStatus {
	t.Helper()
	st, err := fetchStatus(base, name)
	require.NoError(t, err)
	return st
}

// eventuallyStatus waits until check passes on the node's HTTP status.
func eventuallyStatus(t *testing.T, base, name string, check func(c *assert.CollectT, st wireStatus), msg string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := fetchStatus(base, name)
		if assert.NoError(c, err) {
			check(c, st)
		}
	}, 15*time.Second, 10*time.Millisecond, msg)
}

// eventuallyHolds waits until the node runs the config with hash want.
func eventuallyHolds(t *testing.T, base, name, want string) {
	t.Helper()
	eventuallyStatus(t, base, name, func(c *assert.CollectT, st wireStatus) {
		assert.Equal(c, PhaseRunning, st.Phase)
		assert.Equal(c, want, st.ConfigHash)
	}, name+" runs config "+want)
}

func serveHTTP(t *testing.T, em *Emulator) string {
	srv := httptest.NewServer(authorized(em))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConfigHashFromEveryWayIn: a node reports the hash of the config it was
// given and the kubelet version in it, whether the config came as user data
// or by a maintenance-mode apply.
func TestConfigHashFromEveryWayIn(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	base := serveHTTP(t, em)
	cl := newTestCluster(t, "hash")
	defaultKubernetes := "v" + constants.DefaultKubernetesVersion

	configuredNode(t, em, "cp-userdata", cl.controlPlane)
	st := httpStatus(t, base, "cp-userdata")
	require.Equal(t, configHash(cl.controlPlane), st.ConfigHash)
	require.Equal(t, defaultKubernetes, st.KubernetesVersion)

	maint, err := em.Create(context.Background(), NodeSpec{Name: "cp-maintenance"})
	require.NoError(t, err)
	require.Empty(t, httpStatus(t, base, "cp-maintenance").ConfigHash, "maintenance mode holds no config")
	data := patched(t, cl.controlPlane, patchKubelet)
	_, err = connectInsecure(t, maint.Address).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: data})
	require.NoError(t, err)
	eventuallyHolds(t, base, "cp-maintenance", configHash(data))
	require.Equal(t, "v1.34.1", httpStatus(t, base, "cp-maintenance").KubernetesVersion)

	c := connect(t, cl.admin, maint.Address)
	require.NoError(t, c.Reset(callCtx(t), true, true))
	eventuallyStatus(t, base, "cp-maintenance", func(c *assert.CollectT, st wireStatus) {
		assert.Equal(c, PhaseMaintenance, st.Phase)
	}, "back in maintenance mode")
	st = httpStatus(t, base, "cp-maintenance")
	require.Empty(t, st.ConfigHash, "a reset wipes the config")
	require.Empty(t, st.KubernetesVersion)
}

// TestApplyModesOnARunningNode: each mode answers the mode it used and the
// node ends up holding what Talos would have it hold.
func TestApplyModesOnARunningNode(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	base := serveHTTP(t, em)
	cl := newTestCluster(t, "modes")
	original := configHash(cl.controlPlane)
	A, NR, R, S, T := machine.ApplyConfigurationRequest_AUTO, machine.ApplyConfigurationRequest_NO_REBOOT,
		machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_STAGED, machine.ApplyConfigurationRequest_TRY

	for i, tc := range []struct {
		name     string
		patch    string
		mode     machine.ApplyConfigurationRequest_Mode
		wantMode machine.ApplyConfigurationRequest_Mode
		wantCode codes.Code // an error instead of wantMode
		reboots  bool
		runs     bool // the node runs the new config (else still the original)
		stages   bool
		k8s      string
	}{
		{name: "AUTO kubelet change in place", patch: patchKubelet, mode: A, wantMode: NR, runs: true, k8s: "v1.34.1"},
		{name: "AUTO network change in place", patch: patchNetwork, mode: A, wantMode: NR, runs: true},
		{name: "AUTO sysctl change reboots", patch: patchSysctl, mode: A, wantMode: R, reboots: true, runs: true},
		{name: "NO_REBOOT in place", patch: patchKubelet, mode: NR, wantMode: NR, runs: true, k8s: "v1.34.1"},
		{name: "NO_REBOOT refuses a change that needs a reboot", patch: patchSysctl, mode: NR, wantCode: codes.FailedPrecondition},
		{name: "REBOOT reboots even for a hot change", patch: patchKubelet, mode: R, wantMode: R, reboots: true, runs: true, k8s: "v1.34.1"},
		{name: "STAGED waits for the next reboot", patch: patchSysctl, mode: S, wantMode: S, stages: true},
		{name: "TRY refuses a change that needs a reboot", patch: patchSysctl, mode: T, wantCode: codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "cp-" + string(rune('a'+i))
			st := configuredNode(t, em, name, cl.controlPlane)
			c := connect(t, cl.admin, st.Address)
			data := patched(t, cl.controlPlane, tc.patch)
			resp, err := c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: data, Mode: tc.mode})
			if tc.wantCode != codes.OK {
				requireCode(t, tc.wantCode, err)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.wantMode, resp.GetMessages()[0].GetMode())
			}
			want := original
			if tc.runs {
				want = configHash(data)
			}
			eventuallyHolds(t, base, name, want)
			got := httpStatus(t, base, name)
			if tc.stages {
				require.Equal(t, configHash(data), got.StagedConfigHash)
			} else {
				require.Empty(t, got.StagedConfigHash)
			}
			k8s := tc.k8s
			if k8s == "" {
				k8s = "v" + constants.DefaultKubernetesVersion
			}
			require.Equal(t, k8s, got.KubernetesVersion)
			// The node's journal tells whether it went down on the way.
			reboots := 0
			if tc.reboots {
				reboots = 1
			}
			require.Equal(t, reboots, journalLines(em, name, "going down: rebooting"))
		})
	}
}

// TestStagedAndTriedConfigs: a staged config boots on the next reboot (also
// after an emulator restart), a TRY config rolls back unless confirmed.
func TestStagedAndTriedConfigs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	em, stop := startEmulator(t, restartableConfig(dir))
	base := serveHTTP(t, em)
	cl := newTestCluster(t, "staged")
	st := configuredNode(t, em, "cp-1", cl.controlPlane)
	c := connect(t, cl.admin, st.Address)

	tried := patched(t, cl.controlPlane, patchNetwork)
	try := func(data []byte, timeout time.Duration) {
		t.Helper()
		resp, err := c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{
			Data: data, Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(timeout),
		})
		require.NoError(t, err)
		require.Equal(t, machine.ApplyConfigurationRequest_TRY, resp.GetMessages()[0].GetMode())
	}
	try(tried, 50*time.Millisecond)
	require.Equal(t, configHash(tried), httpStatus(t, base, "cp-1").ConfigHash, "a try applies at once")
	eventuallyHolds(t, base, "cp-1", configHash(cl.controlPlane))

	confirmed := patched(t, cl.controlPlane, patchKubelet)
	try(tried, time.Hour)
	_, err := c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: confirmed, Mode: machine.ApplyConfigurationRequest_AUTO})
	require.NoError(t, err)
	require.Equal(t, configHash(confirmed), httpStatus(t, base, "cp-1").ConfigHash, "an apply ends the try")

	staged := patched(t, confirmed, patchSysctl)
	_, err = c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: staged, Mode: machine.ApplyConfigurationRequest_STAGED})
	require.NoError(t, err)
	stop()

	em2, _ := startEmulator(t, restartableConfig(dir))
	base2 := serveHTTP(t, em2)
	eventuallyHolds(t, base2, "cp-1", configHash(confirmed))
	got := httpStatus(t, base2, "cp-1")
	require.Equal(t, "v1.34.1", got.KubernetesVersion, "persisted across the restart")
	require.Equal(t, configHash(staged), got.StagedConfigHash, "the staged config survives the restart")
	require.NoError(t, c.Reboot(callCtx(t)))
	eventuallyStatus(t, base2, "cp-1", func(c *assert.CollectT, st wireStatus) {
		assert.Equal(c, PhaseRunning, st.Phase)
		assert.Equal(c, configHash(staged), st.ConfigHash)
		assert.Empty(c, st.StagedConfigHash)
	}, "the reboot boots the staged config")
}

// TestRefuseApplyFault: the fault makes ApplyConfiguration fail with a
// retryable code until it is lifted; then the same apply goes through.
func TestRefuseApplyFault(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	base := serveHTTP(t, em)
	cl := newTestCluster(t, "refuse")
	st := configuredNode(t, em, "cp-1", cl.controlPlane)
	maint, err := em.Create(context.Background(), NodeSpec{Name: "spare"})
	require.NoError(t, err)
	data := patched(t, cl.controlPlane, patchKubelet)

	for _, name := range []string{"cp-1", "spare"} {
		putFaults(t, base, name, Faults{RefuseApply: true})
	}
	c := connect(t, cl.admin, st.Address)
	_, err = c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: data})
	requireCode(t, codes.Unavailable, err)
	_, err = connectInsecure(t, maint.Address).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.controlPlane})
	requireCode(t, codes.Unavailable, err) // maintenance mode refuses too
	require.Equal(t, configHash(cl.controlPlane), httpStatus(t, base, "cp-1").ConfigHash, "a refused apply changes nothing")

	putFaults(t, base, "cp-1", Faults{})
	_, err = c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: data})
	require.NoError(t, err)
	eventuallyHolds(t, base, "cp-1", configHash(data))
}

func putFaults(t *testing.T, base, name string, f Faults) {
	t.Helper()
	b, err := json.Marshal(f)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPut, base+"/v1/nodes/"+name+"/faults", bytes.NewReader(b))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// journalLines counts the lines of a node's journal holding substr.
func journalLines(em *Emulator, name, substr string) int {
	n, err := em.node(name)
	if err != nil {
		return -1
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	count := 0
	for _, l := range n.journal {
		if strings.Contains(l, substr) {
			count++
		}
	}
	return count
}

// TestRebootApplyOutlivesTheEmulator: a config applied with a reboot (mode
// REBOOT, or an install from maintenance mode) is on disk before the answer,
// so a node whose emulator stopped mid-reboot comes back running it.
func TestRebootApplyOutlivesTheEmulator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cl := newTestCluster(t, "outlive-apply")
	slow := restartableConfig(dir)
	slow.RebootDelay, slow.InstallDelay = time.Hour, time.Hour
	em, stop := startEmulator(t, slow)
	cp := configuredNode(t, em, "cp-1", cl.controlPlane)
	fresh, err := em.Create(context.Background(), NodeSpec{Name: "cp-2"})
	require.NoError(t, err)

	rebooted := patched(t, cl.controlPlane, patchKubelet)
	_, err = connect(t, cl.admin, cp.Address).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{
		Data: rebooted, Mode: machine.ApplyConfigurationRequest_REBOOT,
	})
	require.NoError(t, err)
	_, err = connectInsecure(t, fresh.Address).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.controlPlane})
	require.NoError(t, err)
	stop()

	em2, _ := startEmulator(t, restartableConfig(dir))
	base := serveHTTP(t, em2)
	eventuallyHolds(t, base, "cp-1", configHash(rebooted))
	eventuallyHolds(t, base, "cp-2", configHash(cl.controlPlane))
	require.Equal(t, "v1.34.1", httpStatus(t, base, "cp-1").KubernetesVersion)
	require.Empty(t, httpStatus(t, base, "cp-1").StagedConfigHash)
}
