package main

// Booting real Talos machines as QEMU processes: one per node, a qcow2 disk
// each, the Talos API forwarded to a loopback address (boot_real.go).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// bootQEMU starts one QEMU process per node: a qcow2 disk made with
// qemu-img, the ISO as CD-ROM, user-mode networking that forwards the
// node's Talos API to a loopback address of its own, KVM when /dev/kvm can
// be opened (else TCG), the serial console in <state-dir>/<name>.console.
func (r *rezusctl) bootQEMU(c *cli.Context, plan bootPlan) error {
	bin, err := exec.LookPath(c.String("qemu-binary"))
	if err != nil {
		return fmt.Errorf("qemu not found (%s): install qemu-system-x86_64 or give --qemu-binary: %w", c.String("qemu-binary"), err)
	}
	img, err := exec.LookPath(c.String("qemu-img"))
	if err != nil {
		return fmt.Errorf("qemu-img not found (%s): install qemu-utils or give --qemu-img: %w", c.String("qemu-img"), err)
	}
	iso := c.String("iso")
	if iso == "" {
		return errors.New("--iso is required for --platform qemu (the Talos metal-amd64.iso)")
	}
	if fi, err := os.Stat(iso); err != nil || fi.IsDir() {
		if err == nil {
			err = errors.New("is a directory")
		}
		return fmt.Errorf("talos ISO %s: %w", iso, err)
	}
	iso, _ = filepath.Abs(iso)
	dir, err := r.bootStateDir(c, plan.Cluster)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if _, err := readBootRecord(dir); err == nil {
		return fmt.Errorf("machines of cluster %s are recorded as running in %s: `rezusctl boot stop --platform qemu --cluster %s --state-dir %s` first", plan.Cluster, dir, plan.Cluster, dir)
	}
	accel, cpu := qemuAccel(c.Context, bin)
	rec := bootRecord{Platform: "qemu", Cluster: plan.Cluster}
	taken := map[string]bool{}
	stopAll := func() {
		for _, n := range rec.Nodes {
			stopPID(n.PID)
		}
	}
	for _, n := range plan.Nodes {
		disk := filepath.Join(dir, n.Name+".qcow2")
		if _, err := os.Stat(disk); errors.Is(err, os.ErrNotExist) {
			if out, err := exec.CommandContext(c.Context, img, "create", "-f", "qcow2", disk, c.String("disk-size")).CombinedOutput(); err != nil {
				stopAll()
				return fmt.Errorf("qemu-img create %s: %w: %s", disk, err, out)
			}
		}
		host, err := freeLoopback(50000, taken)
		if err != nil {
			stopAll()
			return err
		}
		mem := c.String("memory-worker")
		if n.Role == domain.RoleControlPlane {
			mem = c.String("memory-controlplane")
		}
		pidFile := filepath.Join(dir, n.Name+".pid")
		_ = os.Remove(pidFile)
		args := []string{
			"-name", n.Name, "-machine", "q35", "-accel", accel, "-m", mem, "-smp", strconv.Itoa(c.Int("cpus")),
			"-cdrom", iso, "-boot", "order=cd",
			"-drive", "file=" + disk + ",if=virtio,format=qcow2",
			"-netdev", fmt.Sprintf("user,id=n0,hostfwd=tcp:%s:50000-:50000", host),
			"-device", "virtio-net-pci,netdev=n0",
			"-display", "none", "-serial", "file:" + filepath.Join(dir, n.Name+".console"),
			"-pidfile", pidFile, "-daemonize",
		}
		if cpu != "" {
			args = append(args, "-cpu", cpu)
		}
		if out, err := exec.CommandContext(c.Context, bin, args...).CombinedOutput(); err != nil {
			stopAll()
			return fmt.Errorf("starting %s: %s %s: %w: %s", n.Name, bin, strings.Join(args, " "), err, out)
		}
		pid, err := readPID(pidFile)
		if err != nil {
			stopAll()
			return fmt.Errorf("starting %s: %w", n.Name, err)
		}
		rec.Nodes = append(rec.Nodes, bootedNode{Name: n.Name, Role: n.Role, Address: net.JoinHostPort(host, "50000"), PID: pid})
	}
	if err := writeBootRecord(dir, rec); err != nil {
		stopAll()
		return err
	}
	fmt.Fprintf(r.env.Stderr, "started %d QEMU machines (%s) in %s\n", len(rec.Nodes), accel, dir)
	return r.finishBoot(c, "qemu", rec.Nodes)
}

func readPID(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("qemu wrote no pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q", file, b)
	}
	return pid, nil
}

// alive reports whether a process runs.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// stopPID ends a process: SIGTERM, then SIGKILL after 5 s.
func stopPID(pid int) {
	if !alive(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for range 50 {
		if !alive(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// kvmCPUs are the CPU models tried under KVM, in order: the host's, then
// the host's without IA32_ARCH_CAPABILITIES, which some nested hosts refuse
// to have set ("failed to set MSR 0x10a", then an assertion: QEMU aborts).
var kvmCPUs = []string{"host", "host,-arch-capabilities"}

// qemuAccel picks how QEMU runs the machines: KVM with the first CPU model
// of kvmCPUs that QEMU starts with where /dev/kvm opens, else TCG. A model
// counts as working when a paused, diskless QEMU with it is still running
// after a second and a half (QEMU aborts at once on a refused MSR).
func qemuAccel(ctx context.Context, bin string) (accel, cpu string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg", ""
	}
	f.Close()
	for _, model := range kvmCPUs {
		pctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		err := exec.CommandContext(pctx, bin, "-accel", "kvm", "-cpu", model, "-machine", "q35", "-m", "32",
			"-display", "none", "-nodefaults", "-monitor", "none", "-S").Run()
		alive := errors.Is(pctx.Err(), context.DeadlineExceeded)
		cancel()
		if alive || err == nil {
			return "kvm", model
		}
	}
	return "tcg", ""
}
