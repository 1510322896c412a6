package upgrade_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
)

// BenchmarkUpgradeSaga53Nodes upgrades a 3+50 cluster, one machine at a time,
// with emulated reboots of a few milliseconds, and reports the saga's own
// time per machine beyond the node's (the emulator's configured upgrade,
// reboot and service-start delays): the quorum check, the status events, the
// machine status writes, the Talos API calls and the polling granularity.
//
//	go test -run '^$' -bench Saga -benchtime 1x ./talos/
func BenchmarkUpgradeSaga53Nodes(b *testing.B) {
	const (
		upgradeDelay = 10 * time.Millisecond
		rebootDelay  = 10 * time.Millisecond
		startDelay   = 10 * time.Millisecond
		node         = upgradeDelay + rebootDelay + startDelay
	)
	e := newSagaEnv(b, 3, 50, func(c *emulator.Config) {
		c.UpgradeDelay, c.RebootDelay, c.ServiceStartDelay = upgradeDelay, rebootDelay, startDelay
	})
	e.startSaga(func(c *upgrade.Config) { c.PollInterval = 2 * time.Millisecond })
	var run, steps time.Duration
	machines := 0
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		e.createUpgrade(name, fmt.Sprintf(`{"talosVersion":"v1.13.%d"}`, i))
		u := e.waitUpgrade(name, "finished", finished)
		require.Equal(b, domain.UpgradeSucceeded, u.Status.Phase, u.Status.Reason)
		run += u.Status.EndTime.Sub(*u.Status.StartTime)
		for _, m := range u.Status.Machines {
			steps += m.Finished.Sub(*m.Started)
		}
		machines += len(u.Status.Machines)
	}
	b.StopTimer()
	perMachine := run / time.Duration(machines)
	perStep := steps / time.Duration(machines)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(perMachine), "ms/machine")
	b.ReportMetric(ms(node), "ms-node/machine")
	b.ReportMetric(ms(perMachine-node), "ms-overhead/machine")
	b.ReportMetric(ms(perStep-node), "ms-step-overhead/machine")
	b.ReportMetric(ms(perMachine-perStep), "ms-between-machines")
}

// BenchmarkKubernetesUpgrade53Nodes runs Kubernetes upgrades of a 3+50
// cluster one machine at a time and reports the saga's time per machine: a
// Kubernetes step applies the next config in place, so the emulator adds no
// delay of its own and all of it is overhead — the reachability check, the
// config render, the ApplyConfiguration call, the config record (the
// annotation and the ConfigApplied status), the health check and the four
// status events of the step.
//
//	go test -run '^$' -bench KubernetesUpgrade -benchtime 1x ./controllers/upgrade/
func BenchmarkKubernetesUpgrade53Nodes(b *testing.B) {
	e := newSagaEnv(b, 3, 50, nil)
	e.startSaga(func(c *upgrade.Config) { c.PollInterval = 2 * time.Millisecond })
	var run, steps time.Duration
	machines := 0
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		e.createUpgrade(name, fmt.Sprintf(`{"kubernetesVersion":"v1.34.%d"}`, i+3))
		u := e.waitUpgrade(name, "finished", finished)
		require.Equal(b, domain.UpgradeSucceeded, u.Status.Phase, u.Status.Reason)
		run += u.Status.EndTime.Sub(*u.Status.StartTime)
		for _, m := range u.Status.Machines {
			steps += m.Finished.Sub(*m.Started)
		}
		machines += len(u.Status.Machines)
	}
	b.StopTimer()
	perMachine := run / time.Duration(machines)
	perStep := steps / time.Duration(machines)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(perMachine), "ms-overhead/machine")
	b.ReportMetric(ms(perStep), "ms-step/machine")
	b.ReportMetric(ms(perMachine-perStep), "ms-between-machines")
}
