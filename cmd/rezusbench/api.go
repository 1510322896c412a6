package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/urfave/cli/v2"
)

func apiCommand() *cli.Command {
	return &cli.Command{
		Name:  "api",
		Usage: "measure the event store and the API on one embedded server (figures for docs/benchmarks.md)",
		Description: "Starts `rezuscloud serve` as a child process on a temporary data dir with the embedded NATS\n" +
			"listening on loopback, then measures (a) raw JetStream synchronous publishes carrying\n" +
			"Nats-Expected-Last-Subject-Sequence and (b) creates and updates through the HTTP API at 1, 8\n" +
			"and 64 concurrent clients, the p99 of writes at a fixed rate, list latency with many tenants\n" +
			"and the server's RSS.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: 5 * time.Second, Usage: "length of each throughput phase"},
			&cli.IntFlag{Name: "tenants", Value: 10000, Usage: "tenants present for the list and RSS measurements"},
			&cli.IntFlag{Name: "nodegroups", Value: 50000, Usage: "node groups present for the RSS measurement"},
			&cli.IntFlag{Name: "rate", Value: 1000, Usage: "writes per second of the fixed-rate latency phase"},
			&cli.StringFlag{Name: "clients", Value: "1,8,64", Usage: "concurrency levels"},
			&cli.StringFlag{Name: "data-dir", Usage: "data dir for the server (default: a new temp dir, removed afterwards)"},
			&cli.StringFlag{Name: "server-memory-limit", Usage: "GOMEMLIMIT for the server process (e.g. 256MiB); default: none"},
			&cli.StringFlag{Name: "server-cpu-profile", Usage: "have the server write <path>.cpu and <path>.heap profiles"},
			&cli.StringFlag{Name: "record", Usage: "write this run's figures as JSON to FILE (docs/benchmarks.json records the last full run)"},
			&cli.StringFlag{Name: "compare", Usage: "print this run's ratios (API over raw publish) beside those recorded in FILE; information only (figures from another machine or day are no floor: `rezusbench ab` gates)"},
			&cli.StringFlag{Name: "commit", Usage: "with --record: the commit measured (`git rev-parse HEAD`), the base `rezusbench ab` compares later code with"},
			&cli.IntFlag{Name: "cluster", Value: 1, Usage: "start this many replicas forming an embedded NATS cluster (streams at min(3, n) replicas) and spread requests over them round robin; 1 is one process"},
		},
		Action: runAPI,
	}
}

// runAPI measures the event store and the API; its output is the Markdown
// of docs/benchmarks.md's tables.
func runAPI(c *cli.Context) error {
	ctx := c.Context
	levels, err := parseLevels(c.String("clients"))
	if err != nil {
		return err
	}
	var recorded *figures
	if path := c.String("compare"); path != "" {
		f, err := readFigures(path)
		if err != nil {
			return err
		}
		recorded = f
	}
	dir := c.String("data-dir")
	if dir == "" {
		d, err := os.MkdirTemp("", "rezus-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	exe, err := serverBinary(c)
	if err != nil {
		return err
	}
	env, stop, err := startBenchCluster(ctx, exe, dir, c.Int("cluster"), c.String("server-cpu-profile"), c.String("server-memory-limit"))
	if err != nil {
		return err
	}
	defer stop()
	dur := c.Duration("duration")

	machine := fmt.Sprintf("%d CPUs, GOMAXPROCS=%d, %s/%s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("# rezusbench api\n\n%s, %s, server pid %d, server GOMEMLIMIT=%q\n\n",
		time.Now().UTC().Format(time.RFC3339), machine, env.pid, c.String("server-memory-limit"))
	figs := newFigures(machine, "")
	figs.Command = fmt.Sprintf("rezusbench api --duration %s --tenants %d --nodegroups %d --rate %d --clients %s",
		dur, c.Int("tenants"), c.Int("nodegroups"), c.Int("rate"), c.String("clients"))
	if n := c.Int("cluster"); n > 1 {
		figs.Command += fmt.Sprintf(" --cluster %d", n)
		fmt.Printf("%d replicas in one embedded NATS cluster (R%d), requests round robin; RSS is the first replica's\n\n", n, env.replicas)
	}
	fmt.Println("| phase | clients | ops | ops/s | p50 | p99 | b/a |")
	fmt.Println("|---|---|---|---|---|---|---|")
	if err := env.measureWrites(ctx, levels, dur, figs); err != nil {
		return err
	}
	fixed, err := env.fixedRate(ctx, c.Int("rate"), 10*time.Second)
	if err != nil {
		return err
	}
	fixed.print(fmt.Sprintf("API writes at %d/s (latency from schedule)", c.Int("rate")), 0, 0)
	figs.add(fmt.Sprintf("fixed-rate/%d-per-s", c.Int("rate")), fixed, 0)

	fmt.Println()
	have, err := env.count(ctx, "/api/v1/tenants")
	if err != nil {
		return err
	}
	start := time.Now()
	haveNG, err := env.count(ctx, "/api/v1/nodegroups")
	if err != nil {
		return err
	}
	// The write phases made node groups already; top up to the wanted total.
	if err := env.populate(ctx, c.Int("tenants")-have, max(0, c.Int("nodegroups")-haveNG)); err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Printf("populated %d tenants and %d node groups through the API (64 clients) in %s: %.0f creates/s\n\n",
		c.Int("tenants")-have, max(0, c.Int("nodegroups")-haveNG), took.Round(time.Millisecond), float64(c.Int("tenants")-have+max(0, c.Int("nodegroups")-haveNG))/took.Seconds())
	fmt.Println("| list | items | runs | p50 | p99 | bytes |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, q := range []string{"/api/v1/tenants", "/api/v1/tenants?limit=500", "/api/v1/tenants?labelSelector=bench%3Dyes,shard%20in%20(s1,s2)", "/api/v1/nodegroups"} {
		if err := env.listLatency(ctx, q, 20); err != nil {
			return err
		}
	}
	tenants, err := env.count(ctx, "/api/v1/tenants")
	if err != nil {
		return err
	}
	nodeGroups, err := env.count(ctx, "/api/v1/nodegroups")
	if err != nil {
		return err
	}
	fmt.Printf("\nobjects present: %d tenants, %d node groups (the write phases' node groups included)\n", tenants, nodeGroups)
	rss, hwm := procRSS(env.pid)
	fmt.Printf("\nserver RSS with the data above: %.1f MiB (peak %.1f MiB)\n\n", float64(rss)/(1<<20), float64(hwm)/(1<<20))
	figs.RSSMiB = round2(float64(rss) / (1 << 20))
	if path := c.String("record"); path != "" {
		figs.Commit = c.String("commit")
		if err := figs.write(path); err != nil {
			return err
		}
	}
	if recorded != nil {
		printComparison(c.String("compare"), recorded, compareFigures(recorded, figs))
	}
	return nil
}

// parseLevels reads --clients: comma-separated positive numbers.
func parseLevels(s string) ([]int, error) {
	var levels []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--clients: %q is not a positive number", f)
		}
		levels = append(levels, n)
	}
	return levels, nil
}

// measureWrites runs the write phases into figs: raw JetStream publishes,
// then API creates and updates, at each level of clients for d each, and
// records each API phase's ratio to the raw publish rate at its level (b/a).
// The table rows go to stdout.
func (e *benchEnv) measureWrites(ctx context.Context, levels []int, d time.Duration, figs *figures) error {
	if err := e.ensureBenchTenant(ctx); err != nil {
		return err
	}
	// Warm both paths up first (connections, JetStream's first blocks, the
	// server's caches), so the first measured phase is not also the cold one.
	warm := min(d/4, time.Second)
	if _, err := e.rawPublish(ctx, 1, warm); err != nil {
		return err
	}
	if _, err := e.apiCreates(ctx, 8, warm, "warm"); err != nil {
		return err
	}
	raw := map[int]float64{}
	for _, n := range levels {
		r, err := e.rawPublish(ctx, n, d)
		if err != nil {
			return err
		}
		raw[n] = r.rate()
		r.print("a: JetStream publish + expected seq", n, 0)
		figs.add(phaseKey("publish", n), r, 0)
	}
	for _, n := range levels {
		r, err := e.apiCreates(ctx, n, d, fmt.Sprintf("c%d", n))
		if err != nil {
			return err
		}
		r.print("b: API create (POST)", n, r.rate()/raw[n])
		figs.add(phaseKey("create", n), r, r.rate()/raw[n])
		u, err := e.apiUpdates(ctx, n, d, fmt.Sprintf("c%d", n))
		if err != nil {
			return err
		}
		u.print("b: API update (PATCH)", n, u.rate()/raw[n])
		figs.add(phaseKey("update", n), u, u.rate()/raw[n])
	}
	return nil
}

// ensureBenchTenant creates the tenant the write phases work in, and the
// Provider their node groups name (the API refuses a node group naming a
// Provider that does not exist). It is a metal Provider whose groups select
// registered machines: none are registered, so applies fail at once, without
// tofu, and the figures stay the API's.
func (e *benchEnv) ensureBenchTenant(ctx context.Context) error {
	code, b, err := e.request(ctx, http.MethodPost, "/api/v1/providers", "application/json", `{"metadata":{"name":"emu"},"spec":{"type":"metal"}}`)
	if err == nil && code != http.StatusCreated && code != http.StatusConflict {
		return fmt.Errorf("creating the bench provider: %d %s", code, b)
	}
	if err != nil {
		return err
	}
	code, b, err = e.request(ctx, http.MethodPost, "/api/v1/tenants", "application/json", tenantJSON("bench", 0))
	if err == nil && code != http.StatusCreated && code != http.StatusConflict {
		err = fmt.Errorf("creating the bench tenant: %d %s", code, b)
	}
	return err
}

// rawPublish is the floor: what JetStream does for a write like ours, minus
// everything RezusCloud adds. Each client appends to its own aggregate subject
// with the expected last subject sequence, as the event store does.
func (e *benchEnv) rawPublish(ctx context.Context, n int, d time.Duration) (*result, error) {
	name := fmt.Sprintf("BENCH_RAW_%d", n)
	if _, err := e.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench" + strconv.Itoa(n) + ".>"}, Storage: jetstream.FileStorage, Replicas: e.replicas}); err != nil {
		return nil, err
	}
	defer e.js.DeleteStream(context.Background(), name)
	last := make([]uint64, n)
	payload := bytes.Repeat([]byte("x"), 600) // about the size of an event
	return closedLoop(ctx, n, d, func(c, i int) error {
		msg := &nats.Msg{Subject: fmt.Sprintf("bench%d.raw.%d", n, c), Data: payload, Header: nats.Header{}}
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(last[c], 10))
		ack, err := e.js.PublishMsg(ctx, msg)
		if err != nil {
			return err
		}
		last[c] = ack.Sequence
		return nil
	})
}

// benchCollection is where the write phases create and update: node groups of
// one tenant. Writing tenants would also measure their PKI generation (a Talos
// secrets bundle per tenant, made in the background), which is not the API's
// write path; populate measures tenant creation with it.
const benchCollection = "/api/v1/tenants/bench/nodegroups"

func nodeGroupJSON(name string, i int) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"bench":"yes","shard":"s%d"}},"spec":{"role":"worker","count":%d,"provider":"emu","providerConfig":{"selector":"bench=yes"}}}`, name, i%4, 1+i%5)
}

func tenantJSON(name string, i int) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"bench":"yes","shard":"s%d"}},"spec":{"talosVersion":"v1.13.0"}}`, name, i%4)
}

func (e *benchEnv) apiCreates(ctx context.Context, n int, d time.Duration, prefix string) (*result, error) {
	counts := make([]int, n)
	if e.created == nil {
		e.created = map[string][]int{}
	}
	e.created[prefix] = counts
	return closedLoop(ctx, n, d, func(c, i int) error {
		code, b, err := e.request(ctx, http.MethodPost, benchCollection, "application/json", nodeGroupJSON(fmt.Sprintf("%s-%d-%d", prefix, c, i), i))
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("create: %d %s", code, b)
		}
		counts[c] = i + 1 // written only by client c; read after closedLoop returns
		return nil
	})
}

// apiUpdates changes a label of the tenants each client created, round robin.
func (e *benchEnv) apiUpdates(ctx context.Context, n int, d time.Duration, prefix string) (*result, error) {
	counts := e.created[prefix]
	return closedLoop(ctx, n, d, func(c, i int) error {
		have := min(20, counts[c])
		if have == 0 {
			return fmt.Errorf("client %d created no tenants to update", c)
		}
		path := fmt.Sprintf("%s/%s-%d-%d", benchCollection, prefix, c, i%have)
		code, b, err := e.request(ctx, http.MethodPatch, path, "application/merge-patch+json", fmt.Sprintf(`{"metadata":{"labels":{"rev":"r%d"}}}`, i))
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("update %s: %d %s", path, code, b)
		}
		return nil
	})
}

// fixedRate sends writes on a fixed schedule and measures each from the time
// it was due, so queueing behind a slow write counts (no coordinated omission).
func (e *benchEnv) fixedRate(ctx context.Context, rate int, d time.Duration) (*result, error) {
	total := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	due := make(chan time.Time, total)
	res := &result{lat: make([]time.Duration, 0, total)}
	var mu sync.Mutex
	var firstErr atomic.Value
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				i := seq.Add(1)
				code, b, err := e.request(ctx, http.MethodPost, benchCollection, "application/json", nodeGroupJSON(fmt.Sprintf("rate-%d", i), int(i)))
				if err == nil && code != http.StatusCreated {
					err = fmt.Errorf("create: %d %s", code, b)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				l := time.Since(at)
				mu.Lock()
				res.lat = append(res.lat, l)
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		due <- at
	}
	close(due)
	wg.Wait()
	res.elapsed = time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return res, nil
}

// populate adds tenants (to reach the wanted count) and node groups spread over them.
func (e *benchEnv) populate(ctx context.Context, tenants, nodeGroups int) error {
	names := make([]string, 0, max(tenants, 1))
	var work []func() error
	for i := range tenants {
		name := fmt.Sprintf("pop-%05d", i)
		names = append(names, name)
		work = append(work, func() error {
			return e.expect(ctx, http.StatusCreated, "/api/v1/tenants", tenantJSON(name, i))
		})
	}
	if err := parallel(64, work); err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	// Node groups go into the populated tenants once those exist.
	work = work[:0]
	for i := range nodeGroups {
		tenant := names[i%len(names)]
		body := fmt.Sprintf(`{"metadata":{"name":"ng-%d","labels":{"pool":"p%d"}},"spec":{"role":"worker","count":%d,"provider":"emu","providerConfig":{"selector":"pool in (p0,p1,p2)","installDisk":"/dev/sda"}}}`, i/len(names), i%3, 1+i%5)
		work = append(work, func() error {
			return e.expect(ctx, http.StatusCreated, "/api/v1/tenants/"+tenant+"/nodegroups", body)
		})
	}
	return parallel(64, work)
}

func (e *benchEnv) listLatency(ctx context.Context, path string, runs int) error {
	res := &result{}
	var items, size int
	start := time.Now()
	for range runs {
		t0 := time.Now()
		code, b, err := e.request(ctx, http.MethodGet, path, "", "")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("list %s: %d", path, code)
		}
		res.lat = append(res.lat, time.Since(t0))
		size = len(b)
		items = bytes.Count(b, []byte(`"uid":`))
	}
	res.elapsed = time.Since(start)
	fmt.Printf("| `GET %s` | %d | %d | %s | %s | %d |\n", path, items, runs, res.pct(0.5).Round(time.Microsecond), res.pct(0.99).Round(time.Microsecond), size)
	return nil
}
