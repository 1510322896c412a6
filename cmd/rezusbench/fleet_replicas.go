package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/providers"
)

// fleetEmulator is the light node emulator a fleet on several replicas
// builds in, run in this process: then the replicas' CPU figures are
// theirs and their tofu's only, not one replica's with every node's.
type fleetEmulator struct {
	emu        *emulator.Emulator
	url, token string
}

// startFleetEmulator runs the emulator until ctx ends, with the delays of
// the one `serve --with-emulator` runs (fleetEmulatedDelay).
func startFleetEmulator(ctx context.Context, dir string) (*fleetEmulator, error) {
	emu, err := emulator.New(emulator.Config{StateDir: filepath.Join(dir, "emulator"), ShutdownDelay: emulator.InteractiveShutdownDelay})
	if err != nil {
		return nil, fmt.Errorf("starting the emulator: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: emu.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = emu.Run(ctx) }()
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	select {
	case <-emu.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &fleetEmulator{emu: emu, url: "http://" + ln.Addr().String(), token: emu.APIToken()}, nil
}

// takeOver points the Provider `emulated` at this emulator. Each replica
// runs `serve --with-emulator --emulator-kube off`, so that every one of
// them knows the nodes are light (no Kubernetes to drain or probe), and
// registers its own idle emulator at start: once every replica has (each
// wrote its emulator/api.env under its data dir first), the credentials
// are replaced with this emulator's. built checks it took.
func (f *fleetEmulator) takeOver(ctx context.Context, env *benchEnv, dir string, replicas int) error {
	if err := env.waitFor(ctx, 60*time.Second, func() (bool, error) {
		for i := range replicas {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("node%d", i), "emulator", "api.env")); err != nil {
				return false, nil
			}
		}
		code, _, err := env.request(ctx, http.MethodGet, "/api/v1/providers/emulated", "", "")
		return code == http.StatusOK, err
	}); err != nil {
		return fmt.Errorf("the replicas did not register their emulators: %w", err)
	}
	code, b, err := env.request(ctx, http.MethodPut, "/api/v1/credentials/emulated", "application/json",
		fmt.Sprintf(`{"data":{%q:%q,%q:%q}}`, providers.EmulatorEndpointEnv, f.url, providers.EmulatorTokenEnv, f.token))
	if err == nil && code != http.StatusCreated && code != http.StatusOK {
		err = fmt.Errorf("pointing the Provider emulated at rezusbench's emulator: %d %s", code, b)
	}
	return err
}

// built fails unless every machine of the fleet is a node of this emulator:
// a replica that registered its own after takeOver would have got some.
func (f *fleetEmulator) built(machines int) error {
	if n := len(f.emu.List()); n != machines {
		return fmt.Errorf("rezusbench's emulator has %d of the %d machines: a replica registered its own emulator late", n, machines)
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
