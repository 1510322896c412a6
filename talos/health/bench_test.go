package health_test

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// BenchmarkHealth100Nodes probes a tenant of 3 control planes and 97 workers
// (emulated, each on its own loopback IP, over mTLS through the machinery
// client) with refresh, so every iteration is a whole probe: 100 connections,
// 203 Talos calls and the write-back check. The first probe, which also
// writes 101 statuses, is reported as first-probe-ms. Target: < 1 s.
func BenchmarkHealth100Nodes(b *testing.B) {
	h := newHealthEnv(b, 3, 97, nil)
	start := time.Now()
	got, err := h.svc.Probe(h.ctx, h.tenant, true)
	first := time.Since(start)
	if err != nil || got.State != domain.HealthReady {
		b.Fatalf("first probe: %v %s %v", err, got.State, got.Reasons)
	}
	h.sync()
	b.ResetTimer()
	for b.Loop() {
		got, err := h.svc.Probe(h.ctx, h.tenant, true)
		if err != nil || got.State != domain.HealthReady || len(got.Machines) != 100 {
			b.Fatalf("probe: %v %s %v", err, got.State, got.Reasons)
		}
	}
	b.ReportMetric(float64(first.Milliseconds()), "first-probe-ms")
}
