package tofu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/proctree"
	"github.com/rezuscloud/rezuscloud/providers"
)

// Binary finds and runs the tofu binary.
type Binary struct {
	// Bin is the tofu executable: a path, or a name looked up on PATH.
	Bin string
	// Mirror is a provider filesystem mirror (host/namespace/type/version/os_arch/...);
	// empty installs providers from their registries.
	Mirror string
	// Grace is how long an interrupted tofu may take to stop (and release its
	// state lock) before its process group is killed; default 30s.
	Grace time.Duration
	// Runner runs tofu's commands; nil runs Bin as a subprocess (the only
	// runner outside tests, which record what tofu was asked without it).
	Runner Runner
	// Sandbox, when set, runs tofu where the data dir and the secrets are
	// hidden from it (sandbox.go); the server always sets it.
	Sandbox *Sandbox
}

// CheckPaths refuses relative paths: tofu runs in per-tenant directories
// under workDir, where a relative mirror, binary or work dir would name
// another file (the caller makes them absolute once, from where it started).
func (t Binary) CheckPaths(workDir string) []error {
	var errs []error
	for _, p := range []struct{ field, path string }{
		{"WorkDir", workDir}, {"Tofu.Mirror", t.Mirror}, {"Tofu.Bin", t.Bin},
	} {
		if p.path == "" || filepath.IsAbs(p.path) {
			continue
		}
		// A bare name is looked up on PATH.
		if p.field == "Tofu.Bin" && !strings.ContainsRune(p.path, filepath.Separator) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s %q must be an absolute path", p.field, p.path))
	}
	return errs
}

// Runner runs one tofu command: args in dir with exactly env (nothing
// inherited), stdout and stderr both to out. When ctx ends it interrupts tofu
// as a user at a terminal would, so tofu stops cleanly and releases its state
// lock, and returns once tofu is gone.
type Runner interface {
	RunTofu(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error
}

// ErrTofuMissing says the tofu binary cannot be found.
var ErrTofuMissing = errors.New("tofu not found")

// Path resolves the binary, or fails with ErrTofuMissing and how to fix it.
func (t Binary) Path() (string, error) {
	bin := t.Bin
	if bin == "" {
		bin = "tofu"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%w: %q is not an executable (set --tofu or REZUSCLOUD_TOFU, put tofu on PATH, or build it with `go tool task tools`)", ErrTofuMissing, bin)
	}
	return filepath.Abs(p)
}

// CLIConfig is the content of the tofu CLI configuration (TF_CLI_CONFIG_FILE):
// providers found in the mirror install from it, every other provider from its
// registry, and downloaded providers are shared through pluginCache.
func (t Binary) CLIConfig(pluginCache string) (string, error) {
	var sb strings.Builder
	if pluginCache != "" {
		fmt.Fprintf(&sb, "plugin_cache_dir = %s\n", strconv.Quote(pluginCache))
		// A new work dir has no lock file; without this, tofu 1.10 then
		// installs the provider into the shared cache again, over the entry
		// other tenants' running plans and applies read (CI saw "could not
		// read package directory … no such file or directory"). With it, an
		// entry already there is linked as it is. The lock file records
		// this platform's checksum only, which suits work dirs that never
		// leave this server.
		sb.WriteString("plugin_cache_may_break_dependency_lock_file = true\n")
	}
	if t.Mirror == "" {
		return sb.String(), nil
	}
	mirror, err := filepath.Abs(t.Mirror)
	if err != nil {
		return "", err
	}
	addrs, err := providers.MirrorProviders(mirror)
	if err != nil {
		return "", err
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("provider mirror %s holds no providers (expected <host>/<namespace>/<type>/<version>/<os_arch>/...)", mirror)
	}
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	list := "[" + strings.Join(quoted, ", ") + "]"
	fmt.Fprintf(&sb, "provider_installation {\n  filesystem_mirror {\n    path    = %s\n    include = %s\n  }\n  direct {\n    exclude = %s\n  }\n}\n",
		strconv.Quote(mirror), list, list)
	return sb.String(), nil
}

// Exec runs a tofu command through the Runner, or as a subprocess.
func (t Binary) Exec(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error {
	if t.Runner != nil {
		return t.Runner.RunTofu(ctx, dir, env, out, args...)
	}
	return t.RunTofu(ctx, dir, env, out, args...)
}

// RunTofu runs the tofu binary with args in dir with exactly env (and the
// marks of internal/proctree), writing its
// output to out. When ctx ends, tofu's process group gets SIGINT (tofu then
// stops cleanly and releases its lock), and is killed after Grace. Provider
// plugins left behind are killed with the group when tofu exits.
func (t Binary) RunTofu(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error {
	bin, err := t.Path()
	if err != nil {
		return err
	}
	grace := t.Grace
	if grace == 0 {
		grace = 30 * time.Second
	}
	// Marked, so that what tofu leaves is found if it outlives us
	// (internal/proctree; the server ends such orphans when it starts).
	env = append(append([]string(nil), env...), proctree.Marks()...)
	var cmd *exec.Cmd
	if t.Sandbox != nil {
		if abs, err := filepath.Abs(bin); err == nil {
			bin = abs
		}
		if cmd, err = sandboxCommand(ctx, t.Sandbox.spec(bin, dir, t.Mirror, env), env, args...); err != nil {
			return err
		}
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		// Its own process group, so a cancel reaches the provider
		// plugins too; and it dies with the server (a restart must not
		// race a leftover tofu).
		cmd.SysProcAttr = tofuProcAttr()
	}
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	// SIGINT, not the default SIGKILL: a killed tofu keeps its state lock
	// and may leave half-written state.
	// A run fenced off its tenant (eventstore.ErrFenced) is killed at once:
	// another replica may start the tenant's next tofu, and this one's
	// state writes would be refused anyway.
	cmd.Cancel = func() error {
		if errors.Is(context.Cause(ctx), eventstore.ErrFenced) {
			return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	}
	// A tofu that does not stop within the grace is killed, and Wait stops
	// waiting for plugins that hold its output open.
	cmd.WaitDelay = grace
	killStaleGroup(dir)
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("tofu %s: %w", args[0], context.Cause(ctx))
		}
		return fmt.Errorf("starting tofu: %w", err)
	}
	pgid := cmd.Process.Pid
	pidFile := filepath.Join(dir, groupFile)
	_ = os.WriteFile(pidFile, []byte(strconv.Itoa(pgid)), 0o600)
	defer os.Remove(pidFile)
	werr := cmd.Wait()
	// Plugins outlive a killed tofu; nothing of the group may stay behind.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if ctx.Err() != nil {
		return fmt.Errorf("tofu %s: %w", args[0], context.Cause(ctx))
	}
	if werr != nil {
		return fmt.Errorf("tofu %s: %w", args[0], werr)
	}
	return nil
}

// groupFile records the process group of the tofu running in a work dir, so
// that after a crash of the server the plugins tofu left are found and killed.
const groupFile = ".rezus-tofu.pgid"

// killStaleGroup kills what is left of the process group recorded in dir: the
// provider plugins of a tofu that died with a crashed server (Pdeathsig kills
// tofu itself, not its children). Only processes of that group that are tofu
// or terraform providers are signalled, so a recycled id hits nothing else.
func killStaleGroup(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, groupFile))
	if err != nil {
		return
	}
	defer os.Remove(filepath.Join(dir, groupFile))
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pgid <= 1 {
		return
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so read after the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		fields := strings.Fields(string(stat)[i+1:])
		if len(fields) < 3 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		exe := filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0])
		if exe == "tofu" || strings.HasPrefix(exe, "terraform-provider-") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
