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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting tofu: %w", err)
	}
	pgid := cmd.Process.Pid
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
