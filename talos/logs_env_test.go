package talos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// The LogReader reads emulated nodes' logs through the real Talos API with
// an os:reader certificate of the tenant's PKI.
func TestLogReaderAgainstEmulatedNodes(t *testing.T) {
	h := talostest.Start(t, 1, 1)
	r := talos.NewLogReader(talos.LogConfig{Cache: h.Cache, PKI: h.PKI, Port: talostest.Port, FirstAnswer: time.Second})
	ctx := h.Ctx

	readAll := func(rc io.ReadCloser, err error) string {
		t.Helper()
		require.NoError(t, err)
		defer rc.Close()
		raw, err := io.ReadAll(rc)
		require.NoError(t, err)
		return string(raw)
	}

	out := readAll(r.Logs(ctx, h.Tenant, "cp-1", "etcd", false, 10))
	assert.Contains(t, out, "etcd: starting\n")
	assert.Contains(t, out, "etcd: running on talos")
	out = readAll(r.Dmesg(ctx, h.Tenant, "cp-1", false))
	assert.Contains(t, out, "etcd bootstrapped")
	out = readAll(r.Dmesg(ctx, h.Tenant, "w-1", false))
	assert.Contains(t, out, "services running")

	t.Run("follow", func(t *testing.T) {
		rc, err := r.Logs(ctx, h.Tenant, "w-1", "kubelet", true, -1)
		require.NoError(t, err)
		sc := bufio.NewScanner(rc)
		var seen []string
		for len(seen) < 2 && sc.Scan() {
			seen = append(seen, sc.Text())
		}
		require.Len(t, seen, 2)
		assert.Contains(t, seen[1], "kubelet: running on talos")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for sc.Scan() {
			}
		}()
		require.NoError(t, rc.Close())
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("closing a followed log did not end it")
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := r.Logs(ctx, h.Tenant, "w-1", "etcd", false, -1)
		assert.Equal(t, domain.ReasonNotFound, domain.ReasonOf(err), "%v", err)
		_, err = r.Logs(ctx, h.Tenant, "ghost", "apid", false, -1)
		assert.Equal(t, domain.ReasonNotFound, domain.ReasonOf(err), "%v", err)

		spec, jerr := json.Marshal(domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker})
		require.NoError(t, jerr)
		h.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: domain.MachineKind.Kind, Tenant: h.Tenant, Name: "w-new"},
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "w-new", Tenant: h.Tenant}, Spec: spec}})
		_, err = r.Dmesg(ctx, h.Tenant, "w-new", false)
		assert.Equal(t, domain.ReasonConflict, domain.ReasonOf(err), "%v", err)

		h.Fault("w-1", emulator.Faults{Unreachable: true})
		_, err = r.Dmesg(ctx, h.Tenant, "w-1", false)
		assert.Equal(t, domain.ReasonServiceUnavailable, domain.ReasonOf(err), "%v", err)
		assert.Contains(t, err.Error(), "unreachable")

		h.Fault("w-1", emulator.Faults{Hang: true})
		start := time.Now()
		_, err = r.Logs(ctx, h.Tenant, "w-1", "apid", false, -1)
		assert.Equal(t, domain.ReasonServiceUnavailable, domain.ReasonOf(err), "%v", err)
		assert.Less(t, time.Since(start), 5*time.Second)

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = r.Dmesg(cctx, h.Tenant, "cp-1", false)
		assert.Error(t, err)
		assert.False(t, strings.Contains(err.Error(), "panic"))
	})
}
