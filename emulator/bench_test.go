package emulator

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/require"
)

// BenchmarkBootMaintenance boots b.N nodes in maintenance mode (what
// `rezusctl boot` does) and measures the time until each answers Version over
// insecure TLS, and the peak RSS:
//
//	go test -run '^$' -bench BootMaintenance -benchtime 500x ./emulator/
func BenchmarkBootMaintenance(b *testing.B) {
	n := b.N
	em, err := New(Config{})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	<-em.Ready()
	defer func() { cancel(); <-done }()

	b.ResetTimer()
	start := time.Now()
	addrs := make([]string, n)
	for i := range n {
		st, err := em.Create(ctx, NodeSpec{Name: fmt.Sprintf("node-%d", i)})
		require.NoError(b, err)
		addrs[i] = st.Address
	}
	created := time.Since(start)
	parallel(addrs, func(addr string) {
		c, err := client.New(context.Background(), client.WithEndpoints(addr),
			client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // maintenance mode.
		require.NoError(b, err)
		defer c.Close()
		_, err = c.Version(context.Background())
		require.NoError(b, err)
	})
	ready := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(created.Milliseconds()), "ms-to-create")
	b.ReportMetric(float64(ready.Milliseconds()), "ms-to-ready")
	b.ReportMetric(float64(peakRSS(b))/(1<<20), "MiB-peak-RSS")
}

// parallel runs f on every address with 16 workers.
func parallel(addrs []string, f func(string)) {
	var wg sync.WaitGroup
	work := make(chan string)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for addr := range work {
				f(addr)
			}
		}()
	}
	for _, a := range addrs {
		work <- a
	}
	close(work)
	wg.Wait()
}

// BenchmarkBootNodes boots b.N configured nodes (3 control planes, the rest
// workers) with the default, realistic stage delays, and measures the time
// until every one answers Version over mTLS through the machinery client, and
// the process's peak RSS. Run the 500-node figure with
//
//	go test -run '^$' -bench BootNodes -benchtime 500x ./emulator/
func BenchmarkBootNodes(b *testing.B) { benchmarkBootNodes(b, false) }

// BenchmarkBootNodesCOSI is BenchmarkBootNodes with every node's COSI state
// made and read (a MachineStatus Get each, as `talosctl get machinestatus`),
// so the RSS includes 500 nodes' resources; 497 of 500 are workers of one
// cluster, so each node holds 500 members:
//
//	go test -run '^$' -bench BootNodesCOSI -benchtime 500x ./emulator/
func BenchmarkBootNodesCOSI(b *testing.B) { benchmarkBootNodes(b, true) }

func benchmarkBootNodes(b *testing.B, withCOSI bool) {
	n := b.N
	cl := newTestCluster(b, "bench")
	em, err := New(Config{})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	<-em.Ready()
	defer func() { cancel(); <-done }()

	b.ResetTimer()
	start := time.Now()
	addrs := make([]string, n)
	for i := range n {
		data, name := cl.worker, fmt.Sprintf("worker-%d", i)
		if i < 3 {
			data, name = cl.controlPlane, fmt.Sprintf("cp-%d", i)
		}
		st, err := em.Create(ctx, NodeSpec{Name: name, UserData: data})
		require.NoError(b, err)
		addrs[i] = st.Address
	}
	created := time.Since(start)

	parallel(addrs, func(addr string) { waitVersion(b, cl, addr, withCOSI) })
	ready := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(created.Milliseconds()), "ms-to-create")
	b.ReportMetric(float64(ready.Milliseconds()), "ms-to-ready")
	b.ReportMetric(float64(peakRSS(b))/(1<<20), "MiB-peak-RSS")
}

// waitVersion polls one node until it answers Version over mTLS (and, with
// cosi, a MachineStatus Get).
func waitVersion(b *testing.B, cl testCluster, addr string, cosi bool) {
	c, err := client.New(context.Background(), client.WithConfig(cl.admin), client.WithEndpoints(addr))
	require.NoError(b, err)
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Version(ctx)
		if err == nil && cosi {
			_, err = safe.StateGetByID[*runtime.MachineStatus](ctx, c.COSI, runtime.MachineStatusID)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// peakRSS reads VmHWM from /proc (Linux); 0 elsewhere.
func peakRSS(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(b, err)
			return kb << 10
		}
	}
	return 0
}
