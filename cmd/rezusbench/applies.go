package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
)

func appliesCommand() *cli.Command {
	return &cli.Command{
		Name:  "applies",
		Usage: "measure the apply worker with real tofu on the in-process emulator (figures for docs/benchmarks.md)",
		Description: "Starts `rezuscloud serve --with-emulator` as a child process, creates --tenants tenants with one\n" +
			"emulated control-plane machine each and measures how many applies finish per minute; then makes\n" +
			"each tenant apply again with nothing to change and reports the management plane's overhead per\n" +
			"apply: the run's wall time minus the time spent in tofu processes (status.tofuMilliseconds).",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "tenants", Value: 50, Usage: "tenants to build"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "--apply-concurrency of the server"},
			&cli.StringFlag{Name: "tofu", EnvVars: []string{"REZUSCLOUD_TOFU"}, Value: ".tools/bin/tofu", Usage: "the tofu binary"},
			&cli.StringFlag{Name: "provider-mirror", EnvVars: []string{"REZUSCLOUD_PROVIDER_MIRROR"}, Value: ".tools/mirror", Usage: "the provider mirror"},
			&cli.StringFlag{Name: "data-dir", Usage: "data dir for the server (default: a new temp dir, removed afterwards)"},
		},
		Action: runBenchApplies,
	}
}

type benchApply struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		Phase            string     `json:"phase"`
		StartTime        *time.Time `json:"startTime"`
		EndTime          *time.Time `json:"endTime"`
		TofuMilliseconds int64      `json:"tofuMilliseconds"`
		Error            string     `json:"error"`
		Resources        struct {
			Added, Changed, Destroyed int
		} `json:"resources"`
	} `json:"status"`
}

func runBenchApplies(c *cli.Context) error {
	ctx := c.Context
	dir := c.String("data-dir")
	if dir == "" {
		d, err := os.MkdirTemp("", "rezus-bench-applies-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	n := c.Int("tenants")
	exe, err := serverBinary(c)
	if err != nil {
		return err
	}
	env, stop, err := startBenchServer(ctx, exe, dir, "", "", "--with-emulator", "--tofu", c.String("tofu"),
		"--provider-mirror", c.String("provider-mirror"), "--apply-concurrency", strconv.Itoa(c.Int("concurrency")),
		"--apply-debounce", "200ms", "--resync", "0")
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
	fmt.Printf("apply worker: %d tenants x 1 emulated control plane, --apply-concurrency %d, %d CPUs\n", n, c.Int("concurrency"), runtime.NumCPU())

	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("b%03d", i)
		if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants", `{"metadata":{"name":"`+name+`"},"spec":{}}`); err != nil {
			return err
		}
		if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants/"+name+"/nodegroups",
			`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`); err != nil {
			return err
		}
	}
	first, err := env.waitApplies(ctx, n, 1, 15*time.Minute)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Printf("  build: %d applies in %s = %.1f applies/minute (from the first create to the last success)\n",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Minutes())
	report("  build", first)

	// No-change applies: a label change queues the tenant; tofu finds nothing to do.
	for i := range n {
		name := fmt.Sprintf("b%03d", i)
		code, b, err := env.request(ctx, http.MethodPatch, "/api/v1/tenants/"+name, "application/merge-patch+json", `{"metadata":{"labels":{"bench":"again"}}}`)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("patching %s: %d %s %v", name, code, b, err)
		}
	}
	second, err := env.waitApplies(ctx, n, 2, 15*time.Minute)
	if err != nil {
		return err
	}
	for _, a := range second {
		if a.Status.Resources.Added+a.Status.Resources.Changed+a.Status.Resources.Destroyed != 0 {
			return fmt.Errorf("apply %s changed resources: %+v", a.Metadata.Name, a.Status.Resources)
		}
	}
	report("  no-change", second)
	return nil
}

// waitApplies waits until each tenant has want finished applies and returns each tenant's last one.
func (e *benchEnv) waitApplies(ctx context.Context, tenants, want int, timeout time.Duration) ([]benchApply, error) {
	var last []benchApply
	err := e.waitFor(ctx, timeout, func() (bool, error) {
		last = last[:0]
		for i := range tenants {
			code, b, err := e.request(ctx, http.MethodGet, fmt.Sprintf("/api/v1/tenants/b%03d/applies", i), "", "")
			if err != nil || code != http.StatusOK {
				return false, err
			}
			var l struct{ Items []benchApply }
			if err := json.Unmarshal(b, &l); err != nil {
				return false, err
			}
			done := 0
			for _, a := range l.Items {
				if a.Status.EndTime != nil {
					if a.Status.Phase != "Succeeded" {
						return false, fmt.Errorf("apply %s of b%03d: %s: %s", a.Metadata.Name, i, a.Status.Phase, a.Status.Error)
					}
					done++
				}
			}
			if done < want {
				return false, nil
			}
			sort.Slice(l.Items, func(x, y int) bool { return l.Items[x].Status.StartTime.Before(*l.Items[y].Status.StartTime) })
			last = append(last, l.Items[len(l.Items)-1])
		}
		return true, nil
	})
	return last, err
}

func (e *benchEnv) waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return e.waitEvery(ctx, timeout, 250*time.Millisecond, cond)
}

// waitEvery is waitFor asking every every.
func (e *benchEnv) waitEvery(ctx context.Context, timeout, every time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

func report(phase string, as []benchApply) {
	var wall, tofu, over []time.Duration
	for _, a := range as {
		w := a.Status.EndTime.Sub(*a.Status.StartTime)
		t := time.Duration(a.Status.TofuMilliseconds) * time.Millisecond
		wall, tofu, over = append(wall, w), append(tofu, t), append(over, w-t)
	}
	fmt.Printf("%s: wall p50 %s p95 %s | tofu p50 %s p95 %s | overhead (wall - tofu) p50 %s p95 %s max %s\n", phase,
		pctDur(wall, 50), pctDur(wall, 95), pctDur(tofu, 50), pctDur(tofu, 95), pctDur(over, 50), pctDur(over, 95), pctDur(over, 100))
}

func pctDur(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return s[i].Round(time.Millisecond)
}
