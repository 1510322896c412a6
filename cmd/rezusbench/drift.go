package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

func driftCommand() *cli.Command {
	return &cli.Command{
		Name:  "drift",
		Usage: "measure what drift checks cost (CPU seconds per tenant check, real tofu on the in-process emulator)",
		Description: "Starts `rezuscloud serve --with-emulator` as a child process, builds --tenants tenants with one\n" +
			"emulated control plane each, then lets every tenant be drift-checked --rounds times (spec.driftCheck\n" +
			"interval --interval) and reports the CPU time the server and its tofu processes spent per check\n" +
			"(/proc: the server's utime+stime and its waited-for children's), the check's wall time, and what\n" +
			"that makes for 100 tenants checked hourly.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "tenants", Value: 10, Usage: "tenants to build and check"},
			&cli.IntFlag{Name: "rounds", Value: 3, Usage: "checks per tenant to measure"},
			&cli.DurationFlag{Name: "interval", Value: 20 * time.Second, Usage: "each tenant's spec.driftCheck.interval"},
			&cli.StringFlag{Name: "tofu", EnvVars: []string{"REZUSCLOUD_TOFU"}, Value: ".tools/bin/tofu", Usage: "the tofu binary"},
			&cli.StringFlag{Name: "provider-mirror", EnvVars: []string{"REZUSCLOUD_PROVIDER_MIRROR"}, Value: ".tools/mirror", Usage: "the provider mirror"},
		},
		Action: runBenchDrift,
	}
}

// cpuTicks is a process's CPU time with its waited-for children's, in clock
// ticks (/proc/<pid>/stat utime, stime, cutime, cstime).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statTicks(string(b))
}

// statTicks sums utime, stime, cutime and cstime of a /proc/<pid>/stat
// line. The command name, in parentheses, may hold spaces and parentheses:
// the fields are counted from the last ')'.
func statTicks(s string) (int64, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("not a /proc stat line: %q", s)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return 0, fmt.Errorf("a /proc stat line of %d fields after the command", len(f))
	}
	var sum int64
	for _, i := range []int{11, 12, 13, 14} { // fields 14-17 of stat, after pid and comm
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

func runBenchDrift(c *cli.Context) error {
	ctx := c.Context
	dir, err := os.MkdirTemp("", "rezus-bench-drift-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n, rounds, every := c.Int("tenants"), c.Int("rounds"), c.Duration("interval")
	exe, err := serverBinary(c)
	if err != nil {
		return err
	}
	env, stop, err := startBenchServer(ctx, exe, dir, "", "", "--with-emulator", "--emulator-kube", "off", "--tofu", c.String("tofu"),
		"--provider-mirror", c.String("provider-mirror"), "--apply-debounce", "200ms", "--resync", "1s",
		"--drift-interval", "0", "--drift-min-interval", "10s")
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
	fmt.Printf("drift checks: %d tenants x 1 emulated control plane, interval %s, %d rounds, %d CPUs\n", n, every, rounds, runtime.NumCPU())
	for i := range n {
		name := fmt.Sprintf("b%03d", i)
		if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants", `{"metadata":{"name":"`+name+`"},"spec":{"driftCheck":{"interval":"`+every.String()+`"}}}`); err != nil {
			return err
		}
		if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants/"+name+"/nodegroups",
			`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`); err != nil {
			return err
		}
	}
	if _, err := env.waitApplies(ctx, n, 1, 15*time.Minute); err != nil {
		return err
	}
	// Wait for a first check of every tenant, then measure rounds more.
	checked := func() ([]time.Time, error) {
		out := make([]time.Time, n)
		for i := range n {
			code, b, err := env.request(ctx, http.MethodGet, fmt.Sprintf("/api/v1/tenants/b%03d", i), "", "")
			if err != nil || code != http.StatusOK {
				return nil, fmt.Errorf("reading b%03d: %d %v", i, code, err)
			}
			var t struct {
				Status struct {
					Drift struct {
						CheckedAt *time.Time `json:"checkedAt"`
						Summary   string     `json:"summary"`
						Error     string     `json:"error"`
					} `json:"drift"`
				} `json:"status"`
			}
			if err := json.Unmarshal(b, &t); err != nil {
				return nil, err
			}
			d := t.Status.Drift
			if d.Error != "" {
				return nil, fmt.Errorf("b%03d: the drift check failed: %s", i, d.Error)
			}
			if d.CheckedAt != nil && !strings.HasPrefix(d.Summary, "applied by") {
				out[i] = *d.CheckedAt
			}
		}
		return out, nil
	}
	var base []time.Time
	if err := env.waitFor(ctx, 10*time.Minute, func() (bool, error) {
		var err error
		base, err = checked()
		for _, t := range base {
			if t.IsZero() {
				return false, err
			}
		}
		return err == nil, err
	}); err != nil {
		return err
	}
	t0, err := cpuTicks(env.pid)
	if err != nil {
		return err
	}
	start := time.Now()
	counts := make([]int, n)
	last := append([]time.Time(nil), base...)
	if err := env.waitFor(ctx, time.Duration(rounds+2)*every*time.Duration(max(n/4, 1))+5*time.Minute, func() (bool, error) {
		now, err := checked()
		if err != nil {
			return false, err
		}
		done := true
		for i, t := range now {
			if t.After(last[i]) {
				counts[i]++
				last[i] = t
			}
			done = done && counts[i] >= rounds
		}
		return done, nil
	}); err != nil {
		return err
	}
	t1, err := cpuTicks(env.pid)
	if err != nil {
		return err
	}
	total := 0
	for _, k := range counts {
		total += k
	}
	elapsed := time.Since(start)
	cpu := float64(t1-t0) / clockTicks
	per := cpu / float64(total)
	fmt.Printf("  %d checks in %s: %.1f CPU-s in all (server and tofu), %.2f CPU-s per check\n", total, elapsed.Round(time.Second), cpu, per)
	fmt.Printf("  100 tenants checked hourly: %.0f CPU-s an hour = %.1f%% of one core, spread over the hour\n", per*100, per*100/36)
	return nil
}
