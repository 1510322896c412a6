package tfrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process started with sandboxEnv set is this binary re-executed to set up
// tofu's sandbox: it runs before anything else of the program and ends by
// executing tofu (or exits 126 saying why it could not).
func init() {
	raw := os.Getenv(sandboxEnv)
	if raw == "" {
		if os.Getenv(sandboxProbeEnv) == "1" {
			os.Exit(0) // ProbeSandbox's run, inside the sandbox: it worked
		}
		return
	}
	if err := enterSandbox(raw); err != nil {
		fmt.Fprintln(os.Stderr, "rezuscloud: tofu sandbox:", err)
		os.Exit(126)
	}
}

// sandboxCommand is the command running tofu (bin) with args in spec's
// sandbox: this binary again, in a mount namespace of its own (inside a user
// namespace when not root, which may not make one otherwise).
func sandboxCommand(ctx context.Context, spec sandboxSpec, env []string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("tofu sandbox: finding this program: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(append([]string(nil), env...), sandboxEnv+"="+spec.encode())
	attr := tofuProcAttr()
	if uid, gid := os.Getuid(), os.Getgid(); uid == 0 {
		attr.Unshareflags = syscall.CLONE_NEWNS
	} else {
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
	return cmd, nil
}

// enterSandbox hides what spec says in this process's own mount namespace,
// binds back what tofu needs, and executes tofu.
func enterSandbox(raw string) error {
	var spec sandboxSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("reading the spec: %w", err)
	}
	// Nothing done here may reach the server's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	hidden := func(p string) bool {
		for _, h := range spec.Hide {
			if p == h || strings.HasPrefix(p, h+string(filepath.Separator)) {
				return true
			}
		}
		return false
	}
	// What is kept is opened before it is covered, and bound back from
	// the open descriptor once it is.
	type kept struct {
		path string
		fd   int
		dir  bool
	}
	var keep []kept
	for _, p := range spec.Keep {
		if !hidden(p) {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue // not made yet: tofu makes it, inside the sandbox
		}
		fd, err := syscall.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", p, err)
		}
		keep = append(keep, kept{path: p, fd: fd, dir: fi.IsDir()})
	}
	for _, h := range spec.Hide {
		if fi, err := os.Stat(h); err != nil || !fi.IsDir() {
			continue
		}
		if err := syscall.Mount("tmpfs", h, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0755"); err != nil {
			return fmt.Errorf("hiding %s: %w", h, err)
		}
	}
	for _, f := range spec.HideFiles {
		if hidden(f) {
			continue
		}
		if fi, err := os.Stat(f); err != nil || fi.IsDir() {
			continue
		}
		if err := syscall.Mount("/dev/null", f, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("hiding %s: %w", f, err)
		}
	}
	for _, k := range keep {
		if k.dir {
			if err := os.MkdirAll(k.path, 0o755); err != nil {
				return err
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(k.path), 0o755); err != nil {
				return err
			}
			if f, err := os.OpenFile(k.path, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				f.Close()
			}
		}
		if err := syscall.Mount(fmt.Sprintf("/proc/self/fd/%d", k.fd), k.path, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("keeping %s: %w", k.path, err)
		}
		syscall.Close(k.fd)
	}
	if err := os.Chdir(spec.Dir); err != nil {
		return err
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, sandboxEnv+"=") {
			env = append(env, kv)
		}
	}
	return syscall.Exec(spec.Bin, append([]string{spec.Bin}, os.Args[1:]...), env)
}

// sandboxProbeEnv makes this binary, executed inside a sandbox by
// ProbeSandbox, exit at once with success.
const sandboxProbeEnv = "REZUSCLOUD_TOFU_SANDBOX_PROBE"

// ProbeSandbox sets up sb once, for this binary itself, and reports why it
// cannot be: a container without the right to make namespaces (the default
// seccomp profile of Docker and Kubernetes refuses them) cannot sandbox tofu.
func ProbeSandbox(ctx context.Context, sb *Sandbox) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	cmd, err := sandboxCommand(ctx, sb.spec(self, dir, "", nil), []string{sandboxProbeEnv + "=1"})
	if err != nil {
		return err
	}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
