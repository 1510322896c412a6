package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

func cpuPhasesCommand() *cli.Command {
	return &cli.Command{
		Name:  "cpu-phases",
		Usage: "where the CPU of an apply goes: sums `perf script` samples by process and phase",
		Description: "Reads `perf script` output (of `perf record -g`, unstripped binaries) on stdin and prints the\n" +
			"CPU seconds of every process kind (the server, the emulator, the tofu sandbox launcher, tofu, each\n" +
			"provider plugin) and, within tofu and the plugins, of each phase (start-up, state key derivation,\n" +
			"state round trips to the server, provider RPC, the graph walk, ...). hack/profile-apply.sh records\n" +
			"and runs it; docs/benchmarks.md reports its tables.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "role", Usage: "`PID=NAME`: the samples of process PID are NAME's (the server, the emulator)"},
			&cli.IntFlag{Name: "tenants", Value: 1, Usage: "divide by this many tenants (the figures are per tenant)"},
		},
		Action: func(c *cli.Context) error {
			roles := map[int]string{}
			for _, r := range c.StringSlice("role") {
				pid, name, ok := strings.Cut(r, "=")
				n, err := strconv.Atoi(pid)
				if !ok || err != nil || name == "" {
					return fmt.Errorf("--role %q: want PID=NAME", r)
				}
				roles[n] = name
			}
			if c.Int("tenants") < 1 {
				return fmt.Errorf("--tenants %d: want 1 or more", c.Int("tenants"))
			}
			p, err := readPerfScript(os.Stdin, roles)
			if err != nil {
				return err
			}
			p.print(os.Stdout, c.Int("tenants"))
			return nil
		},
	}
}

// cpuProfile is the samples of a `perf script`, summed in seconds by
// process kind and by (kind, phase).
type cpuProfile struct {
	kinds  map[string]float64
	phases map[[2]string]float64
	total  float64
}

// readPerfScript sums perf script's samples: a header line (comm, pid,
// time, period in ns, event: `perf script -F
// comm,pid,time,period,event,ip,sym,dso`, the process's id, not the
// thread's) then one frame a line, innermost first. The idle task's
// samples are left out.
func readPerfScript(r io.Reader, roles map[int]string) (*cpuProfile, error) {
	p := &cpuProfile{kinds: map[string]float64{}, phases: map[[2]string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		comm   string
		pid    int
		period float64
		frames []string
		plugin string
		open   bool
	)
	flush := func() {
		if !open {
			return
		}
		kind := processKind(comm, pid, roles)
		if kind == "" {
			open, frames, plugin = false, frames[:0], ""
			return
		}
		if kind == "provider" && plugin != "" {
			kind = "provider " + plugin
		}
		p.kinds[kind] += period
		p.phases[[2]string{kind, samplePhase(kind, frames)}] += period
		p.total += period
		open, frames, plugin = false, frames[:0], ""
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == '\t' || line[0] == ' ':
			if open {
				frames = append(frames, frameSymbol(line))
				if i := strings.Index(line, "terraform-provider-"); i >= 0 && plugin == "" {
					plugin = strings.TrimSuffix(strings.Fields(line[i+len("terraform-provider-"):])[0], ")")
				}
			}
		default:
			flush()
			var err error
			if comm, pid, period, err = parseSampleHeader(line); err != nil {
				return nil, err
			}
			open = true
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if p.total == 0 {
		return nil, fmt.Errorf("no samples on stdin (want the output of perf script)")
	}
	return p, nil
}

// parseSampleHeader reads "comm pid [cpu] time: period event:" (comm may
// hold spaces; the pid is the first field that is all digits after it).
func parseSampleHeader(line string) (comm string, pid int, seconds float64, err error) {
	f := strings.Fields(line)
	for i := 1; i < len(f); i++ {
		n, err := strconv.Atoi(f[i])
		if err != nil {
			continue
		}
		comm, pid = strings.Join(f[:i], " "), n
		for j := i + 1; j+1 < len(f); j++ {
			if strings.HasSuffix(f[j], ":") {
				if ns, err := strconv.ParseFloat(f[j+1], 64); err == nil {
					return comm, pid, ns / 1e9, nil
				}
			}
		}
		break
	}
	return "", 0, 0, fmt.Errorf("not a perf script sample header: %q (record with -F and a cpu-clock or cycles event)", line)
}

// frameSymbol is the function of a frame line "addr sym+off (dso)", with
// " [kernel]" added to a kernel frame's, or the dso when perf found no symbol.
func frameSymbol(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	sym, dso := f[1], strings.Trim(f[len(f)-1], "()")
	if sym == "[unknown]" {
		return "[unknown] " + dso
	}
	if i := strings.LastIndex(sym, "+0x"); i > 0 {
		sym = sym[:i]
	}
	if dso == "[kernel.kallsyms]" {
		sym += " [kernel]"
	}
	return sym
}

// processKind names a sample's process: a role given by pid, tofu, a
// provider plugin (perf keeps 15 bytes of a comm: the caller names it by
// its binary), else the comm.
func processKind(comm string, pid int, roles map[int]string) string {
	switch {
	case roles[pid] != "":
		return roles[pid]
	case comm == "tofu":
		return "tofu"
	case strings.HasPrefix(comm, "terraform-prov"):
		// Named by its binary (readPerfScript), which a frame shows.
		return "provider"
	case comm == "rezuscloud":
		// The server and the emulator come as roles: another
		// rezuscloud is the sandbox that starts each tofu.
		return "tofu sandbox launcher"
	case pid == 0:
		return "" // the idle task
	}
	return "other processes (the recording, the kernel's threads)"
}

// phaseRules map the first frame (innermost first) that matches to a phase.
// A Go process's package initialisation is start-up wherever it goes.
var phaseRules = []struct{ contains, phase string }{
	{"runtime.doInit", "start-up (package init, loading)"},
	{"runtime.schedinit", "start-up (package init, loading)"},
	{"_dl_", "start-up (package init, loading)"},
	{"load_elf_binary", "start-up (package init, loading)"},
	{"crypto/pbkdf2", "state key derivation (pbkdf2)"},
	{"internal/encryption", "state encryption (AES-GCM, JSON)"},
	{"remote-state/http", "state round trips (HTTP backend)"},
	{"crypto/tls", "TLS (state backend, plugin)"},
	{"internal/states/statefile", "state encode/decode"},
	{"internal/states/remote", "state encode/decode"},
	{"internal/getproviders", "provider install and hash checks (init)"},
	{"internal/providercache", "provider install and hash checks (init)"},
	{"go-plugin", "provider RPC (gRPC, msgpack)"},
	{"internal/plugin", "provider RPC (gRPC, msgpack)"},
	{"internal/tfplugin", "provider RPC (gRPC, msgpack)"},
	{"google.golang.org/grpc", "provider RPC (gRPC, msgpack)"},
	{"msgpack", "provider RPC (gRPC, msgpack)"},
	{"hashicorp/hcl", "configuration loading"},
	{"internal/configs", "configuration loading"},
	{"internal/tofu.", "graph walk (refresh, plan, apply)"},
	{"internal/command", "command (UI, JSON output)"},
	// An assembly leaf whose callers frame pointers lost: SHA-2 blocks are
	// pbkdf2's in tofu (the plugin hash checks of init keep their frames),
	// P-521 is go-plugin's certificate for each plugin.
	{"fips140/sha512.", "state key derivation (pbkdf2)"},
	{"fips140/sha256.", "state key derivation (pbkdf2)"},
	{"fips140/nistec", "TLS (state backend, plugin)"},
	{"runtime.gcBgMarkWorker", "Go runtime (GC, scheduler)"},
}

// samplePhase is the phase a sample's frames fall in: the rules for tofu
// and the plugins; the sandbox launcher is start-up and its wait; the
// server and the emulator by the first package of the module the frame is in.
func samplePhase(kind string, frames []string) string {
	for _, rule := range phaseRules {
		for _, f := range frames {
			if strings.Contains(f, rule.contains) {
				return rule.phase
			}
		}
	}
	if kind == "tofu" || strings.HasPrefix(kind, "provider") || kind == "tofu sandbox launcher" {
		for _, f := range frames {
			if strings.HasPrefix(f, "runtime.") {
				return "Go runtime (GC, scheduler)"
			}
		}
		if len(frames) > 0 && strings.HasSuffix(frames[0], " [kernel]") {
			return "kernel (exec, page faults, I/O)"
		}
		return "other"
	}
	for _, f := range frames {
		for _, pkg := range []string{"rezuscloud/rezuscloud/", "nats-io/", "siderolabs/", "k8s.io/"} {
			if i := strings.Index(f, pkg); i >= 0 {
				rest := f[i+len(pkg):]
				if j := strings.IndexAny(rest, "."); j > 0 {
					rest = rest[:j]
				}
				return strings.TrimSuffix(pkg, "/") + "/" + rest
			}
		}
	}
	return "other (Go runtime, stdlib, kernel)"
}

// print writes the kinds, then the phases of each kind, largest first.
func (p *cpuProfile) print(w io.Writer, tenants int) {
	per := 1 / float64(tenants)
	fmt.Fprintf(w, "%.2f CPU-s in all, %.2f a tenant (%d)\n\n| process | CPU-s a tenant | share |\n|---|---|---|\n", p.total, p.total*per, tenants)
	for _, k := range sortedByValue(p.kinds) {
		fmt.Fprintf(w, "| %s | %.3f | %.0f %% |\n", k, p.kinds[k]*per, 100*p.kinds[k]/p.total)
	}
	for _, k := range sortedByValue(p.kinds) {
		fmt.Fprintf(w, "\n%s (%.3f CPU-s a tenant):\n\n| phase | CPU-s a tenant | share of %s |\n|---|---|---|\n", k, p.kinds[k]*per, k)
		inKind := map[string]float64{}
		for key, v := range p.phases {
			if key[0] == k {
				inKind[key[1]] = v
			}
		}
		for _, ph := range sortedByValue(inKind) {
			if inKind[ph]/p.kinds[k] < 0.01 {
				continue
			}
			fmt.Fprintf(w, "| %s | %.3f | %.0f %% |\n", ph, inKind[ph]*per, 100*inKind[ph]/p.kinds[k])
		}
	}
}

func sortedByValue(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
