package backup

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/talos"
)

// BenchmarkSnapshotIntoObjectStore streams a 200 MiB etcd snapshot (the
// emulator's padding) from a control plane through the Talos API into the
// rezus-etcd-backups bucket, sealed as it streams, and a raw object-store
// put of the same size from memory-less filler. It reports the backup's
// throughput (MB/s), its ratio to the raw put (raw-ratio: 1 is as fast),
// and the peak growth of the live Go heap and of the process's RSS over
// the run (server, emulator and NATS share the process), for both:
//
//	go test -run '^$' -bench SnapshotIntoObjectStore -benchtime 3x ./controllers/backup/
func BenchmarkSnapshotIntoObjectStore(b *testing.B) {
	const size = 200 << 20
	c := talostest.Start(b, 1, 0)
	objects, err := eventstore.OpenEtcdBackups(c.Ctx, c.Store, c.Sealed)
	require.NoError(b, err)
	cluster := c.Em.List()[0].ClusterID
	_, err = c.Em.SetEtcdPadding(cluster, size)
	require.NoError(b, err)
	ctrl := New(Config{Store: c.Store, Cache: c.Cache, Backups: objects, PKI: c.PKI, Holder: "bench",
		Nodes: talos.NodeAPI{Timeout: 30 * time.Second}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cps, err := ctrl.controlPlanes(c.Tenant)
	require.NoError(b, err)
	bundle, err := c.PKI.Bundle(c.Ctx, c.Tenant)
	require.NoError(b, err)
	raw, err := c.Store.JetStream().ObjectStore(c.Ctx, eventstore.EtcdBackupBucket)
	require.NoError(b, err)

	var rawTime, backupTime time.Duration
	var peakHeap, peakRSS, rawHeap, rawRSS uint64
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		runtime.GC()
		heap0, rss0 := heapBytes(), rssBytes()
		stop := sample(func(h, r uint64) {
			peakHeap = max(peakHeap, h-min(h, heap0))
			peakRSS = max(peakRSS, r-min(r, rss0))
		})
		b.StartTimer()
		start := time.Now()
		res, err := ctrl.snapshotInto(c.Ctx, bundle, cps[0].Spec.Address, eventstore.EtcdBackupObject(c.Tenant, "bench", strconv.Itoa(i)))
		backupTime += time.Since(start)
		b.StopTimer()
		stop()
		require.NoError(b, err)
		require.Greater(b, res.size, int64(size))

		runtime.GC()
		heap0, rss0 = heapBytes(), rssBytes()
		stop = sample(func(h, r uint64) {
			rawHeap = max(rawHeap, h-min(h, heap0))
			rawRSS = max(rawRSS, r-min(r, rss0))
		})
		start = time.Now()
		_, err = raw.Put(c.Ctx, jetstream.ObjectMeta{Name: "raw-" + strconv.Itoa(i)}, io.LimitReader(filler{}, size))
		rawTime += time.Since(start)
		stop()
		require.NoError(b, err)
		require.NoError(b, raw.Delete(c.Ctx, "raw-"+strconv.Itoa(i)))
		require.NoError(b, objects.Delete(c.Ctx, eventstore.EtcdBackupObject(c.Tenant, "bench", strconv.Itoa(i))))
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(rawTime)/float64(backupTime), "raw-ratio")
	b.ReportMetric(float64(size)*float64(b.N)/rawTime.Seconds()/1e6, "raw-MB/s")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-live-heap-MiB")
	b.ReportMetric(float64(peakRSS)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(rawHeap)/(1<<20), "raw-peak-live-heap-MiB")
	b.ReportMetric(float64(rawRSS)/(1<<20), "raw-peak-rss-MiB")
}

// filler is an endless deterministic stream, never held.
type filler struct{}

func (filler) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i % 251)
	}
	return len(p), nil
}

// sample calls f with the heap and RSS every 5ms until the returned stop.
func sample(f func(heap, rss uint64)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			f(heapBytes(), rssBytes())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// heapBytes is the live heap as the last GC marked it: what the process
// holds, without the garbage a collection has not yet reclaimed (a
// streaming copy makes plenty, and GOGC lets the heap grow twice the live
// size before it is collected; RSS shows what that costs).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// rssBytes is the process's resident set (Linux), 0 elsewhere.
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
