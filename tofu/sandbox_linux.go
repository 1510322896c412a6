package tofu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process started with sandboxEnv set is this binary re-executed as the
// first process of tofu's sandbox: it runs before anything else of the
// program, sets the sandbox up, starts tofu and waits for it, and exits
// with tofu's exit code (or 126 saying why it could not).
func init() {
	raw := os.Getenv(sandboxEnv)
	if raw == "" {
		if os.Getenv(sandboxProbeEnv) == "1" {
			os.Exit(probeInside()) // ProbeSandbox's run, inside the sandbox
		}
		return
	}
	code, err := sandboxInit(raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rezuscloud: tofu sandbox:", err)
		os.Exit(126)
	}
	os.Exit(code)
}

// sandboxCommand is the command running tofu (bin) with args in spec's
// sandbox: this binary again, as the first process of a PID namespace and a
// mount namespace of their own, inside a user namespace when not root (which
// may not make them otherwise; its root is the server's uid, without any
// privilege outside).
func sandboxCommand(ctx context.Context, spec sandboxSpec, env []string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("tofu sandbox: finding this program: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(append([]string(nil), env...), sandboxEnv+"="+spec.encode())
	attr := tofuProcAttr()
	// Cloneflags, not Unshareflags: a PID namespace takes only the
	// children of whoever makes it.
	attr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID
	if uid, gid := os.Getuid(), os.Getgid(); uid != 0 {
		// Root in the namespace, so that the set-up may mount; tofu
		// itself runs without any capability (dropCapabilities).
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
	return cmd, nil
}

// sandboxInit sets the sandbox of raw's spec up in this process's own
// namespaces, then runs tofu as its child until it exits.
func sandboxInit(raw string) (int, error) {
	var spec sandboxSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return 0, fmt.Errorf("reading the spec: %w", err)
	}
	if os.Getpid() != 1 {
		return 0, errors.New("not the first process of a PID namespace of its own")
	}
	if err := enterSandbox(spec); err != nil {
		return 0, err
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, sandboxEnv+"=") {
			env = append(env, kv)
		}
	}
	return superviseTofu(spec.Bin, os.Args[1:], env)
}

// enterSandbox hides what spec says in this process's own mount namespace,
// binds back what tofu needs, gives it a /proc of this PID namespace and a
// /dev of the harmless devices, and moves to its work dir.
func enterSandbox(spec sandboxSpec) error {
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
	var keep []kept
	for _, p := range spec.Keep {
		if !hidden(p) {
			continue
		}
		k, err := openKept(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // not made yet: tofu makes it, inside the sandbox
		}
		if err != nil {
			return err
		}
		keep = append(keep, k)
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
		if err := k.bind(); err != nil {
			return err
		}
	}
	// /dev first: binding its devices back reads the old /proc's fds.
	if err := harmlessDev(); err != nil {
		return err
	}
	if err := ownProc(); err != nil {
		return err
	}
	return os.Chdir(spec.Dir)
}

// kept is a path bound back over what hides it, from a descriptor opened
// before.
type kept struct {
	path string
	fd   int
	dir  bool
}

func openKept(p string) (kept, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return kept{}, err
	}
	fd, err := syscall.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return kept{}, fmt.Errorf("opening %s: %w", p, err)
	}
	return kept{path: p, fd: fd, dir: fi.IsDir()}, nil
}

// bind binds k back at its path (made, empty, in what hides it).
func (k kept) bind() error {
	defer syscall.Close(k.fd)
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
	if err := syscall.Mount("/proc/self/fd/"+strconv.Itoa(k.fd), k.path, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("keeping %s: %w", k.path, err)
	}
	return nil
}

// ownProc mounts a /proc of this PID namespace over the server's: the
// server's processes are not in it, and with them its memory, environment,
// open files, working dir and root (/proc/<pid>/root is the whole host's
// file system, where nothing is hidden). /proc/sys and /proc/sysrq-trigger
// are read-only, as container runtimes leave them.
//
// Inside a user namespace the kernel refuses a new /proc when the server's
// has parts covered (systemd's ProtectKernelTunables, a container runtime's
// masked paths): /proc is then an empty directory, which tofu and its
// plugins do without.
func ownProc() error {
	err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	if errors.Is(err, syscall.EPERM) {
		err = syscall.Mount("tmpfs", "/proc", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC|syscall.MS_RDONLY, "size=4k,mode=0555")
	}
	if err != nil {
		return fmt.Errorf("mounting the sandbox's /proc: %w", err)
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := readOnly(p); err != nil {
			return err
		}
	}
	return nil
}

// readOnly binds p over itself, read-only.
func readOnly(p string) error {
	if err := syscall.Mount(p, p, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", p, err)
	}
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC)
	if err := syscall.Mount("", p, "", flags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", p, err)
	}
	return nil
}

// devices are what tofu and its plugins use of /dev. The rest (disks above
// all: their blocks hold every hidden file) is not in the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// harmlessDev covers /dev with an empty tmpfs and binds back devices.
func harmlessDev() error {
	var keep []kept
	for _, d := range devices {
		k, err := openKept("/dev/" + d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		keep = append(keep, k)
	}
	if err := syscall.Mount("tmpfs", "/dev", "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return fmt.Errorf("covering /dev: %w", err)
	}
	for _, k := range keep {
		if err := k.bind(); err != nil {
			return err
		}
	}
	for name, to := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, "/dev/"+name); err != nil {
			return err
		}
	}
	return os.Mkdir("/dev/shm", 0o1777)
}

// superviseTofu is the work of the sandbox's first process (PID 1): it
// starts tofu without any capability, reaps every process the namespace
// leaves to it (a provider plugin orphaned by tofu), and returns tofu's exit
// code, 128+n for a signal n. When it returns and this process exits, the
// kernel kills whatever is left in the namespace.
//
// The server cancels a run by signalling the process group (tofu.go), which
// tofu shares with this process: tofu gets the SIGINT itself. This process
// catches those signals only so as not to die of them (Go's default) before
// tofu has stopped; the server's SIGKILL after the grace ends it, and the
// namespace with it.
func superviseTofu(bin string, args, env []string) (int, error) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	// The capability bounding set, and no_new_privs, are the calling
	// thread's: tofu must be forked from the thread that dropped them.
	runtime.LockOSThread()
	if err := dropCapabilities(); err != nil {
		return 0, err
	}
	p, err := os.StartProcess(bin, append([]string{bin}, args...), &os.ProcAttr{
		Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		return 0, fmt.Errorf("starting tofu: %w", err)
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waiting for tofu: %w", err)
		}
		if pid != p.Pid {
			continue // an orphan, reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	}
}

// dropCapabilities leaves what this thread starts no capability, even as
// root: the bounding set emptied, the inheritable set cleared and
// no_new_privs set. As root tofu could otherwise unmount what hides the
// server's secrets, or read the kernel's memory (/proc/kcore).
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	for c := 0; c < 64; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, syscall.EINVAL) {
				break // past the kernel's last capability
			}
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing inheritable capabilities: %w", err)
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

// sandboxProbeEnv makes this binary, executed inside a sandbox by
// ProbeSandbox, check it and exit.
const sandboxProbeEnv = "REZUSCLOUD_TOFU_SANDBOX_PROBE"

// probeInside checks, as tofu would run, that this process is in a PID
// namespace of its own (its parent the sandbox's first process, the only
// other process /proc shows, if /proc shows any) and holds no capability.
func probeInside() int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "tofu sandbox: "+format+"\n", a...)
		return 1
	}
	if os.Getppid() != 1 {
		return fail("not in a PID namespace of its own (parent %d)", os.Getppid())
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fail("reading /proc: %v", err)
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != 1 && pid != os.Getpid() {
			return fail("/proc shows process %d, not of the sandbox", pid)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fail("reading its capabilities: %v", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fail("holds capabilities (%+v)", data)
		}
	}
	return 0
}

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
