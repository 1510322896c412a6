package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

func fleetCommand() *cli.Command {
	return &cli.Command{
		Name:  "fleet",
		Usage: "build a fleet of tenants through the API and tofu, sweep its health once, and roll a Talos version across it in waves",
		Description: "Starts the light node emulator as its own process (`rezuscloud emulator --emulator-kube off`)\n" +
			"and `rezuscloud serve --emulator-env` on it as a child process, creates --tenants tenants of 1\n" +
			"control plane and --workers workers each through the API (tofu builds them), waits until every\n" +
			"machine is running, probes every tenant's health once (--sweep-concurrency at a time), then\n" +
			"creates a Rollout of --to over all of them (--waves, --parallel tenants at once, --soak), waits\n" +
			"until it succeeds and every tenant is reconciled with the version written back. It reports the\n" +
			"time of each phase, the rollout's wall clock against what the emulator's delays make the least\n" +
			"it can take, and the server's RSS and CPU seconds (with its tofu children; the emulator's are\n" +
			"not in them). With --cluster N > 1 it starts N replicas in one embedded NATS cluster (as\n" +
			"`rezusbench api --cluster`), spreads its requests round robin, and reports each replica's share:\n" +
			"tenants, applies and CPU seconds; CPU figures are then the replicas' sum.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "tenants", Value: 1000, Usage: "tenants to build"},
			&cli.IntFlag{Name: "workers", Value: 2, Usage: "workers per tenant (each has one control plane too)"},
			&cli.StringFlag{Name: "to", Value: "v1.13.1", Usage: "the Talos version the rollout moves every tenant to"},
			&cli.StringFlag{Name: "waves", Value: "1,10%,100%", Usage: "the rollout's waves"},
			&cli.IntFlag{Name: "parallel", Value: 100, Usage: "tenants of a wave upgraded at once (and the server's --upgrade-concurrency)"},
			&cli.DurationFlag{Name: "soak", Value: 5 * time.Second, Usage: "the soak after each wave"},
			&cli.IntFlag{Name: "apply-concurrency", Value: 4, Usage: "the server's --apply-concurrency"},
			&cli.IntFlag{Name: "sweep-concurrency", Value: 16, Usage: "tenants probed at once in the health sweep"},
			&cli.DurationFlag{Name: "timeout", Value: 3 * time.Hour, Usage: "give up after this long"},
			&cli.IntFlag{Name: "cluster", Value: 1, Usage: "replicas in one embedded NATS cluster (streams at min(3, n) replicas); 1 is one process with the emulator in it"},
			&cli.StringFlag{Name: "profile", Usage: "write the server's CPU and heap profiles to `PREFIX`.cpu and PREFIX.heap"},
			&cli.StringFlag{Name: "tofu", EnvVars: []string{"REZUSCLOUD_TOFU"}, Value: ".tools/bin/tofu", Usage: "the tofu binary"},
			&cli.StringFlag{Name: "provider-mirror", EnvVars: []string{"REZUSCLOUD_PROVIDER_MIRROR"}, Value: ".tools/mirror", Usage: "the provider mirror"},
		},
		Action: runBenchFleet,
	}
}

// fleetEmulatedDelay is what the emulator (its defaults, in-process) makes
// one machine's Talos upgrade take at the least: the shutdown after the
// call is accepted, the upgrade (pulling the installer), the reboot and
// the services starting.
const fleetEmulatedDelay = 1500*time.Millisecond + 3*time.Second + 2*time.Second + time.Second

func runBenchFleet(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	n, workers, parallel := c.Int("tenants"), c.Int("workers"), c.Int("parallel")
	waves, err := domain.ParseWaves(c.String("waves"), parallel)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rezus-bench-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	exe, err := serverBinary(c)
	if err != nil {
		return err
	}
	replicas := c.Int("cluster")
	emu, stopEmu, err := startFleetEmulator(ctx, exe, dir)
	if err != nil {
		return err
	}
	defer stopEmu()
	env, stop, err := startBenchCluster(ctx, exe, dir, replicas, c.String("profile"), "", "--emulator-env", emu.envFile,
		"--tofu", c.String("tofu"), "--provider-mirror", c.String("provider-mirror"), "--apply-debounce", "500ms", "--resync", "0",
		"--drift-interval", "0", "--apply-concurrency", strconv.Itoa(c.Int("apply-concurrency")),
		"--upgrade-concurrency", strconv.Itoa(parallel), "--rollout-interval", "2s")
	if err != nil {
		return err
	}
	defer stop()
	if err := env.waitFor(ctx, 60*time.Second, func() (bool, error) {
		code, _, err := env.request(ctx, http.MethodGet, "/api/v1/providers/emulated", "", "")
		return code == http.StatusOK, err
	}); err != nil {
		return fmt.Errorf("the emulated provider was not registered: %w", err)
	}
	machines := n * (1 + workers)
	where := "light emulator in its own process (not in the figures)"
	if replicas > 1 {
		where = fmt.Sprintf("%d replicas in one embedded NATS cluster, light emulator in its own process; CPU is the replicas' sum, RSS the first's", replicas)
	}
	fmt.Printf("fleet: %d tenants x (1 control plane + %d workers) = %d machines, %s, %d CPUs\n", n, workers, machines, where, runtime.NumCPU())
	each0 := env.cpuEach()
	cpu0 := sumTicks(each0)

	// Build.
	start := time.Now()
	for i := range n {
		name := fleetTenant(i)
		if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants", `{"metadata":{"name":"`+name+`","labels":{"fleet":"bench"}},"spec":{"talosVersion":"v1.13.0"}}`); err != nil {
			return err
		}
		for _, g := range []string{`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
			fmt.Sprintf(`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":%d,"provider":"emulated"}}`, workers)} {
			if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants/"+name+"/nodegroups", g); err != nil {
				return err
			}
		}
	}
	created := time.Since(start)
	last := time.Now()
	// Every listing of 3,000 machines and their applies is server CPU
	// counted in the build's figure: once every 2 s.
	if err := env.waitEvery(ctx, c.Duration("timeout"), fleetPoll(n), func() (bool, error) {
		ready, failed, err := fleetMachines(ctx, env)
		if err == nil && failed != "" {
			err = fmt.Errorf("an apply failed: %s", failed)
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			fmt.Printf("  building: %d of %d machines running after %s\n", ready, machines, time.Since(start).Round(time.Second))
		}
		return ready == machines, err
	}); err != nil {
		return fmt.Errorf("building the fleet: %w", err)
	}
	built := time.Since(start)
	if err := emu.built(ctx, machines); err != nil {
		return err
	}
	each1 := env.cpuEach()
	cpu1 := sumTicks(each1)
	rss, hwm := procRSS(env.pid)
	fmt.Printf("  built: %d machines running %s after the first create (the %d creates took %s)\n", machines, built.Round(time.Second), 3*n, created.Round(time.Millisecond))
	fmt.Printf("    server CPU %.0f s (with tofu), RSS %d MiB (peak %d MiB)\n", float64(cpu1-cpu0)/clockTicks, rss>>20, hwm>>20)

	// One health sweep: every tenant probed anew, some at a time.
	sweepStart := time.Now()
	readyTenants, err := fleetSweep(ctx, env, n, c.Int("sweep-concurrency"))
	if err != nil {
		return err
	}
	sweep := time.Since(sweepStart)
	fmt.Printf("  health sweep: %d tenants (%d machines) probed in %s, %d Ready\n", n, machines, sweep.Round(time.Millisecond), readyTenants)
	if readyTenants != n {
		return fmt.Errorf("the sweep found %d of %d tenants Ready", readyTenants, n)
	}

	// The rollout.
	spec := domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: c.String("to")}, TenantSelector: "fleet=bench", Waves: waves, Soak: c.Duration("soak").String()}
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "fleet-bench"}, "spec": spec})
	cpu2 := env.cpuTicks()
	appliesBefore, _, _, err := fleetApplies(ctx, env)
	if err != nil {
		return err
	}
	rolloutStart := time.Now()
	if err := env.expect(ctx, http.StatusCreated, "/api/v1/rollouts", string(raw)); err != nil {
		return err
	}
	var ro domain.Rollout
	last = time.Now()
	if err := env.waitEvery(ctx, c.Duration("timeout"), min(fleetPoll(n), time.Second), func() (bool, error) {
		code, b, err := env.request(ctx, http.MethodGet, "/api/v1/rollouts/fleet-bench", "", "")
		if err != nil || code != http.StatusOK {
			return false, err
		}
		if err := json.Unmarshal(b, &ro); err != nil {
			return false, err
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			fmt.Printf("  rolling out: %s after %s\n", ro.Status.Message, time.Since(rolloutStart).Round(time.Second))
		}
		switch ro.Status.Phase {
		case domain.RolloutHalted, domain.RolloutAborted:
			return false, fmt.Errorf("the rollout stopped: %s", ro.Status.Message)
		}
		return ro.Status.Phase == domain.RolloutSucceeded, nil
	}); err != nil {
		return fmt.Errorf("rolling out: %w", err)
	}
	rollout := time.Since(rolloutStart)
	cpu3 := env.cpuTicks()
	rss, hwm = procRSS(env.pid)
	least := fleetLeast(&spec, n, 1+workers, c.Duration("soak"))
	fmt.Printf("  rollout: %s to %d tenants in %s (%d waves: %s); the emulator's delays make at least %s (%d machines a tenant one after another, %s each), overhead %s (%.0f%%)\n",
		spec.Change.Description(), ro.Status.Counts.Done, rollout.Round(time.Second), len(waves), domain.FormatWaves(waves),
		least.Round(time.Second), 1+workers, fleetEmulatedDelay, (rollout - least).Round(time.Second), 100*float64(rollout-least)/float64(least))
	included := "the server's alone"
	if replicas > 1 {
		included = "the first replica's"
	}
	fmt.Printf("    server CPU %.0f s during the rollout; RSS %d MiB (peak %d MiB over the whole run, %s)\n",
		float64(cpu3-cpu2)/clockTicks, rss>>20, hwm>>20, included)
	if err := printBreakdown(ctx, env, "fleet-bench"); err != nil {
		return err
	}
	running, _, err := fleetMachinesAt(ctx, env, c.String("to"))
	if err != nil {
		return err
	}
	if running != machines {
		return fmt.Errorf("%d of %d machines report %s after the rollout", running, machines, c.String("to"))
	}
	fmt.Printf("  every machine (%d) reports %s\n", machines, c.String("to"))
	// Each upgrade wrote its version into the tenant's spec, which queues a
	// run of the apply worker; tofu would change nothing, so since issue 49
	// the run makes no Apply. Settled: every tenant reconciled at its
	// generation and no Apply open.
	settleStart := time.Now()
	var applies, unchanged int
	if err := env.waitEvery(ctx, c.Duration("timeout"), fleetPoll(n), func() (bool, error) {
		total, open, failed, err := fleetApplies(ctx, env)
		applies = total
		if err == nil && failed != "" {
			err = fmt.Errorf("an apply failed: %s", failed)
		}
		if err != nil || open > 0 {
			return false, err
		}
		var behind int
		behind, unchanged, err = fleetReconciled(ctx, env)
		return behind == 0, err
	}); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	each4 := env.cpuEach()
	cpu4 := sumTicks(each4)
	fmt.Printf("  settled: every tenant reconciled with the version written back %s after the rollout; %d applies after it (%d in all, %.1f a tenant), %d tenants say NothingToApply; server CPU %.0f s\n",
		time.Since(settleStart).Round(time.Second), applies-appliesBefore, applies, float64(applies)/float64(n), unchanged, float64(cpu4-cpu3)/clockTicks)
	fmt.Printf("  in all: %.0f CPU-s of the server and its tofu processes\n", float64(cpu4-cpu0)/clockTicks)
	if replicas > 1 {
		return printReplicaShares(ctx, env, each0, each1, each4)
	}
	return nil
}

// fleetApplies counts the applies, those not finished, and names a failed one.
func fleetApplies(ctx context.Context, env *benchEnv) (total, open int, failed string, err error) {
	code, b, err := env.request(ctx, http.MethodGet, "/api/v1/applies", "", "")
	if err != nil || code != http.StatusOK {
		return 0, 0, "", err
	}
	var l struct{ Items []domain.Apply }
	if err := json.Unmarshal(b, &l); err != nil {
		return 0, 0, "", err
	}
	for _, a := range l.Items {
		switch {
		case a.Status.Phase == domain.ApplyFailed && failed == "":
			failed = a.Metadata.Tenant + "/" + a.Metadata.Name + ": " + a.Status.Error
		case a.Status.EndTime == nil:
			open++
		}
	}
	return len(l.Items), open, failed, nil
}

// fleetReconciled counts the tenants not reconciled at their generation
// yet, and those whose last run found nothing for tofu to act on.
func fleetReconciled(ctx context.Context, env *benchEnv) (behind, unchanged int, err error) {
	code, b, err := env.request(ctx, http.MethodGet, "/api/v1/tenants?labelSelector=fleet%3Dbench", "", "")
	if err != nil || code != http.StatusOK {
		return 0, 0, fmt.Errorf("listing tenants: %d %w", code, err)
	}
	var l struct{ Items []domain.Tenant }
	if err := json.Unmarshal(b, &l); err != nil {
		return 0, 0, err
	}
	for _, t := range l.Items {
		c := domain.FindCondition(t.Status.Conditions, "Reconciled")
		if t.Status.ObservedGeneration != t.Metadata.Generation || c == nil || c.Status != "True" {
			behind++
		} else if c.Reason == "NothingToApply" {
			unchanged++
		}
	}
	return behind, unchanged, nil
}

func fleetTenant(i int) string { return fmt.Sprintf("f%04d", i) }

// fleetPoll is how often the bench lists the fleet: 250 ms for a small
// one (the CI's), every 2 s from 100 tenants on, where each listing costs
// the server tens of milliseconds.
func fleetPoll(tenants int) time.Duration {
	if tenants < 100 {
		return 250 * time.Millisecond
	}
	return 2 * time.Second
}

// fleetLeast is the least a rollout can take on the emulator: per wave, its
// tenants in rounds of the wave's parallelism, each round a tenant's
// machines one after another, then the soak.
func fleetLeast(spec *domain.RolloutSpec, n, perTenant int, soak time.Duration) time.Duration {
	var d time.Duration
	for i, size := range spec.WaveSizes(n) {
		if size == 0 {
			continue
		}
		p := spec.Waves[i].MaxParallel
		if p == 0 {
			p = size
		}
		rounds := (size + p - 1) / p
		d += time.Duration(rounds*perTenant)*fleetEmulatedDelay + soak
	}
	return d
}

// fleetMachines counts the machines running and ready, and names a failed
// apply if there is one.
func fleetMachines(ctx context.Context, env *benchEnv) (int, string, error) {
	ready, _, err := fleetMachinesAt(ctx, env, "")
	if err != nil {
		return 0, "", err
	}
	_, _, failed, err := fleetApplies(ctx, env)
	return ready, failed, err
}

// fleetMachinesAt counts the machines running and ready (at version, when given).
func fleetMachinesAt(ctx context.Context, env *benchEnv, version string) (int, int, error) {
	code, b, err := env.request(ctx, http.MethodGet, "/api/v1/machines", "", "")
	if err != nil {
		return 0, 0, err
	}
	if code != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /api/v1/machines: %d", code)
	}
	var l struct{ Items []domain.Machine }
	if err := json.Unmarshal(b, &l); err != nil {
		return 0, 0, err
	}
	ready := 0
	for _, m := range l.Items {
		if m.Status.Ready && (version == "" || m.Status.TalosVersion == version) {
			ready++
		}
	}
	return ready, len(l.Items), nil
}

// fleetSweep probes every tenant's health anew, some at a time, and counts
// the Ready ones.
func fleetSweep(ctx context.Context, env *benchEnv, n, concurrency int) (int, error) {
	var (
		mu       sync.Mutex
		ready    int
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				code, b, err := env.request(ctx, http.MethodGet, "/api/v1/tenants/"+fleetTenant(i)+"/health?refresh=true", "", "")
				var h domain.TenantHealth
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("health of %s: %d %s", fleetTenant(i), code, b)
				}
				if err == nil {
					err = json.Unmarshal(b, &h)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if h.State == domain.HealthReady {
					ready++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return ready, firstErr
}
