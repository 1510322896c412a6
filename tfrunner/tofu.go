package tfrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Tofu finds and runs the tofu binary.
type Tofu struct {
	// Bin is the tofu executable: a path, or a name looked up on PATH.
	Bin string
	// Mirror is a provider filesystem mirror (host/namespace/type/version/os_arch/...);
	// empty installs providers from their registries.
	Mirror string
	// Grace is how long an interrupted tofu may take to stop (and release its
	// state lock) before its process group is killed; default 30s.
	Grace time.Duration
}

// ErrTofuMissing says the tofu binary cannot be found.
var ErrTofuMissing = errors.New("tofu not found")

// Path resolves the binary, or fails with ErrTofuMissing and how to fix it.
func (t Tofu) Path() (string, error) {
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
func (t Tofu) CLIConfig(pluginCache string) (string, error) {
	var sb strings.Builder
	if pluginCache != "" {
		fmt.Fprintf(&sb, "plugin_cache_dir = %s\n", strconv.Quote(pluginCache))
	}
	if t.Mirror == "" {
		return sb.String(), nil
	}
	mirror, err := filepath.Abs(t.Mirror)
	if err != nil {
		return "", err
	}
	addrs, err := mirrorProviders(mirror)
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

// mirrorProviders lists the provider addresses (host/namespace/type) in a mirror.
func mirrorProviders(mirror string) ([]string, error) {
	var out []string
	hosts, err := os.ReadDir(mirror)
	if err != nil {
		return nil, fmt.Errorf("reading provider mirror: %w", err)
	}
	for _, h := range hosts {
		if !h.IsDir() {
			continue
		}
		nss, _ := os.ReadDir(filepath.Join(mirror, h.Name()))
		for _, ns := range nss {
			if !ns.IsDir() {
				continue
			}
			types, _ := os.ReadDir(filepath.Join(mirror, h.Name(), ns.Name()))
			for _, ty := range types {
				if ty.IsDir() {
					out = append(out, h.Name()+"/"+ns.Name()+"/"+ty.Name())
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// exec runs tofu with args in dir with exactly env (no inherited variables),
// writing its output to out. When ctx ends, tofu's process group gets SIGINT
// (tofu then stops cleanly and releases its lock), and SIGKILL after Grace.
// Provider plugins left behind are killed with the group when tofu exits.
func (t Tofu) exec(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error {
	bin, err := t.Path()
	if err != nil {
		return err
	}
	grace := t.Grace
	if grace == 0 {
		grace = 30 * time.Second
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	// Its own process group, so a cancel reaches the provider plugins too;
	// and it dies with the server (a restart must not race a leftover tofu).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	killStaleGroup(dir)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting tofu: %w", err)
	}
	pgid := cmd.Process.Pid
	pidFile := filepath.Join(dir, groupFile)
	_ = os.WriteFile(pidFile, []byte(strconv.Itoa(pgid)), 0o600)
	defer os.Remove(pidFile)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		_ = syscall.Kill(-pgid, syscall.SIGINT)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}()
	werr := cmd.Wait()
	close(done)
	<-stopped
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
