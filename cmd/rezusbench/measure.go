package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// result collects latencies of one phase.
type result struct {
	lat     []time.Duration
	elapsed time.Duration
}

func (r *result) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

func (r *result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	return r.lat[min(len(r.lat)-1, int(float64(len(r.lat))*p))]
}

func (r *result) print(phase string, clients int, ratio float64) {
	cl, ra := "-", "-"
	if clients > 0 {
		cl = strconv.Itoa(clients)
	}
	if ratio > 0 {
		ra = fmt.Sprintf("%.2f", ratio)
	}
	fmt.Printf("| %s | %s | %d | %.0f | %s | %s | %s |\n", phase, cl, len(r.lat), r.rate(),
		r.pct(0.50).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond), ra)
}

// closedLoop runs n clients, each calling op back to back until d has passed.
func closedLoop(ctx context.Context, n int, d time.Duration, op func(client, i int) error) (*result, error) {
	var mu sync.Mutex
	res := &result{}
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if err := op(c, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			res.lat = append(res.lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return res, nil
}

// parallel runs work on n goroutines and returns the first error.
func parallel(n int, work []func() error) error {
	ch := make(chan func() error)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range ch {
				if err := f(); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for _, f := range work {
		ch <- f
	}
	close(ch)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// procRSS reads the resident set size and its peak from /proc.
func procRSS(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm
}
