package emulator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// manualTimers holds scheduled stages until the test fires them.
type manualTimers struct {
	mu      sync.Mutex
	pending []func()
	added   chan struct{}
}

func newManualTimers() *manualTimers { return &manualTimers{added: make(chan struct{}, 100)} }

func (m *manualTimers) AfterFunc(_ time.Duration, f func()) {
	m.mu.Lock()
	m.pending = append(m.pending, f)
	m.mu.Unlock()
	m.added <- struct{}{}
}

// fireNext waits for the next scheduled stage and runs it.
func (m *manualTimers) fireNext(t *testing.T) {
	t.Helper()
	select {
	case <-m.added:
	case <-time.After(10 * time.Second):
		t.Fatal("no stage was scheduled")
	}
	m.mu.Lock()
	f := m.pending[0]
	m.pending = m.pending[1:]
	m.mu.Unlock()
	f()
}

// TestBootStages walks a node through its named stages with a manual clock:
// maintenance -> installing -> booting -> running, then rebooting -> booting -> running.
func TestBootStages(t *testing.T) {
	t.Parallel()
	timers := newManualTimers()
	cfg := fastConfig("")
	cfg.AfterFunc = timers.AfterFunc
	em, _ := startEmulator(t, cfg)
	cl := newTestCluster(t, "stages")
	st, err := em.Create(context.Background(), NodeSpec{Name: "cp-1"})
	require.NoError(t, err)
	require.Equal(t, PhaseMaintenance, st.Phase)

	_, err = connectInsecure(t, st.Address).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.controlPlane})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-1", PhaseInstalling)())
	}, 15*time.Second, 10*time.Millisecond, "installing")
	timers.fireNext(t) // install done: the API comes up with mTLS
	require.NoError(t, phaseIs(em, "cp-1", PhaseBooting)())
	c := connect(t, cl.admin, st.Address)
	resp, err := c.ServiceList(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, "Starting", resp.GetMessages()[0].GetServices()[0].GetState())
	timers.fireNext(t) // services up
	require.NoError(t, phaseIs(em, "cp-1", PhaseRunning)())

	require.NoError(t, c.Reboot(callCtx(t)))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-1", PhaseRebooting)())
	}, 15*time.Second, 10*time.Millisecond, "rebooting")
	timers.fireNext(t)
	require.NoError(t, phaseIs(em, "cp-1", PhaseBooting)())
	timers.fireNext(t)
	require.NoError(t, phaseIs(em, "cp-1", PhaseRunning)())
}
