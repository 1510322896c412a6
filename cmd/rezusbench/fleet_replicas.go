package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
)

// fleetEmulator is the light node emulator the fleet builds on, run as its
// own process (`rezuscloud emulator`, issue 49): the server's (or each
// replica's) CPU and RSS figures are then its own and its tofu's, not the
// nodes'. Every replica builds on it (`serve --emulator-env`).
type fleetEmulator struct {
	url, token, envFile string
}

// startFleetEmulator runs `exe emulator` with light nodes until stop, with
// the delays `serve --with-emulator` has (fleetEmulatedDelay).
func startFleetEmulator(ctx context.Context, exe, dir string) (*fleetEmulator, func(), error) {
	emuDir := filepath.Join(dir, "emulator-apart")
	cmd := exec.CommandContext(ctx, exe, "emulator", "--data-dir", emuDir, "--emulator-kube", "off", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	exited, stop, err := startChild(cmd, syscall.SIGTERM, 20*time.Second, nil)
	if err != nil {
		return nil, nil, err
	}
	f := &fleetEmulator{envFile: filepath.Join(emuDir, "emulator", "api.env")}
	deadline := time.Now().Add(time.Minute)
	for {
		if b, err := os.ReadFile(f.envFile); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				k, v, _ := strings.Cut(l, "=")
				switch k {
				case providers.EmulatorEndpointEnv:
					f.url = v
				case providers.EmulatorTokenEnv:
					f.token = v
				}
			}
			if f.url != "" && f.token != "" {
				return f, stop, nil
			}
		}
		select {
		case <-exited:
			return nil, nil, errors.New("the emulator process exited before it wrote its api.env")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("the emulator wrote no %s within a minute", f.envFile)
		}
	}
}

// built fails unless every machine of the fleet is a node of this emulator.
func (f *fleetEmulator) built(ctx context.Context, machines int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/v1/nodes", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var l struct{ Items []json.RawMessage }
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return err
	}
	if len(l.Items) != machines {
		return fmt.Errorf("the emulator has %d of the %d machines", len(l.Items), machines)
	}
	return nil
}

// cpuEach is each replica's CPU time with its waited-for children's (tofu
// and its provider plugins), in clock ticks; 0 for one that cannot be read.
func (e *benchEnv) cpuEach() []int64 {
	out := make([]int64, len(e.pids))
	for i, pid := range e.pids {
		out[i], _ = cpuTicks(pid)
	}
	return out
}

// cpuTicks is the replicas' CPU time together, in clock ticks.
func (e *benchEnv) cpuTicks() int64 { return sumTicks(e.cpuEach()) }

func sumTicks(ticks []int64) int64 {
	var sum int64
	for _, t := range ticks {
		sum += t
	}
	return sum
}

// replicaShare is one replica's part of a fleet run.
type replicaShare struct {
	Holder string
	// Tenants is how many tenants its heartbeat says it works.
	Tenants int
	// Applied is how many tenants it ran applies of; Applies how many.
	Applied, Applies int
	// BuildCPU and CPU are its CPU seconds (tofu's included) while the
	// fleet was built, and over the whole run.
	BuildCPU, CPU float64
}

// replicaShares is each replica's share of the work, in the order of pids:
// a replica is the heartbeat whose holder ends in "-<pid>" (host-pid). The
// CPU figures are the differences of the tick snapshots taken at the first
// create (start), once the fleet was built (built) and at the end, in the
// order of pids. unnamed counts the applies that name no replica of pids.
func replicaShares(pids []int, start, built, end []int64, beats domain.ReplicaList, applies []domain.Apply) (shares []replicaShare, unnamed int) {
	byPid := map[int]int{}
	shares = make([]replicaShare, len(pids))
	for i, pid := range pids {
		byPid[pid] = i
		shares[i] = replicaShare{Holder: "pid " + strconv.Itoa(pid),
			BuildCPU: float64(built[i]-start[i]) / clockTicks, CPU: float64(end[i]-start[i]) / clockTicks}
	}
	index := func(holder string) (int, bool) {
		pid, err := strconv.Atoi(holder[strings.LastIndexByte(holder, '-')+1:])
		if err != nil {
			return 0, false
		}
		i, ok := byPid[pid]
		return i, ok
	}
	for _, r := range beats.Items {
		if i, ok := index(r.Holder); ok {
			shares[i].Holder = r.Holder
			if r.Tenants != nil {
				shares[i].Tenants = *r.Tenants
			}
		}
	}
	tenants := make([]map[string]bool, len(pids))
	for _, a := range applies {
		i, ok := index(a.Status.RanOn())
		if !ok {
			unnamed++
			continue
		}
		if tenants[i] == nil {
			tenants[i] = map[string]bool{}
		}
		tenants[i][a.Metadata.Tenant] = true
		shares[i].Applies++
	}
	for i := range shares {
		shares[i].Applied = len(tenants[i])
	}
	return shares, unnamed
}

// printReplicaShares reports each replica's share of the fleet: the
// heartbeats at the end, every Apply's status.replica, and /proc.
func printReplicaShares(ctx context.Context, env *benchEnv, start, built, end []int64) error {
	code, b, err := env.request(ctx, http.MethodGet, "/api/v1/replicas", "", "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /api/v1/replicas: %d %s", code, b)
	}
	if err != nil {
		return err
	}
	var beats domain.ReplicaList
	if err := json.Unmarshal(b, &beats); err != nil {
		return err
	}
	code, b, err = env.request(ctx, http.MethodGet, "/api/v1/applies", "", "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /api/v1/applies: %d %s", code, b)
	}
	if err != nil {
		return err
	}
	var l struct{ Items []domain.Apply }
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	shares, unnamed := replicaShares(env.pids, start, built, end, beats, l.Items)
	var total float64
	for _, s := range shares {
		total += s.CPU
	}
	fmt.Printf("  per replica: tenants it works (heartbeat) | tenants and applies it ran (status.replica) | CPU-s with its tofu, build / whole run\n")
	for _, s := range shares {
		fmt.Printf("    %s: %d tenants | %d tenants, %d applies | %.0f / %.0f CPU-s (%.0f%%)\n",
			s.Holder, s.Tenants, s.Applied, s.Applies, s.BuildCPU, s.CPU, 100*s.CPU/max(total, 1))
	}
	if unnamed > 0 {
		fmt.Printf("    %d applies name no replica of this run\n", unnamed)
	}
	self, _ := cpuTicks(os.Getpid())
	fmt.Printf("  rezusbench with the emulator in it: %.0f CPU-s since it started\n", float64(self)/clockTicks)
	return nil
}

// startChild starts cmd and answers a channel closed once it exited (after
// done, when given) and a stop that sends it sig and kills it after grace.
func startChild(cmd *exec.Cmd, sig os.Signal, grace time.Duration, done func()) (<-chan struct{}, func(), error) {
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if done != nil {
			done()
		}
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return exited, stop, nil
}
