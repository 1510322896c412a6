package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Booting real Talos machines: QEMU processes (one per node, a qcow2 disk
// each, the Talos API forwarded to a loopback address) or Docker containers
// (the flags talosctl's docker provisioner uses). Both wait until every
// node's Talos API answers in maintenance mode, print the addresses, can
// register them as Machines of a tenant, and are ended by `boot stop`.

// bootedNode is a node a real platform started.
type bootedNode struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Address is where its Talos API answers (host:port).
	Address string `json:"address"`
	// PID is the QEMU process; ID the Docker container.
	PID int    `json:"pid,omitempty"`
	ID  string `json:"id,omitempty"`
}

// bootRecord is what `boot stop` needs: written to <state-dir>/nodes.json.
type bootRecord struct {
	Platform string       `json:"platform"`
	Cluster  string       `json:"cluster"`
	Nodes    []bootedNode `json:"nodes"`
}

// bootLabel marks the containers (and network) of a docker boot.
const bootLabel = "io.rezuscloud.boot.cluster"

// bootStateDir is where a real platform keeps a cluster's disks and record.
func (r *rezusctl) bootStateDir(c *cli.Context, cluster string) (string, error) {
	if d := c.String("state-dir"); d != "" {
		// Absolute: the record and the QEMU processes started from it
		// outlive this working directory (`boot stop` may run elsewhere).
		return absPath(d), nil
	}
	base := ""
	if r.env.Getenv != nil {
		base = r.env.Getenv("XDG_STATE_HOME")
		if base == "" && r.env.Getenv("HOME") != "" {
			base = filepath.Join(r.env.Getenv("HOME"), ".local", "state")
		}
	}
	if base == "" {
		return "", errors.New("give --state-dir (no HOME to keep the machines' disks under)")
	}
	return filepath.Join(base, "rezusctl", "boot", cluster), nil
}

func writeBootRecord(dir string, rec bootRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "nodes.json"), b, 0o600)
}

func readBootRecord(dir string) (bootRecord, error) {
	var rec bootRecord
	b, err := os.ReadFile(filepath.Join(dir, "nodes.json"))
	if err != nil {
		return rec, fmt.Errorf("no booted machines recorded in %s: %w", dir, err)
	}
	return rec, json.Unmarshal(b, &rec)
}

// freeLoopback finds a loopback address whose port is free, from 127.0.200.1
// up, skipping taken: each node gets the Talos API's own port on an address
// of its own, so the address is the Machine's address as it is on metal.
func freeLoopback(port int, taken map[string]bool) (string, error) {
	for c := 200; c < 255; c++ {
		for d := 1; d < 255; d++ {
			host := fmt.Sprintf("127.0.%d.%d", c, d)
			if taken[host] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				continue
			}
			l.Close()
			taken[host] = true
			return host, nil
		}
	}
	return "", errors.New("no free loopback address for the Talos API port")
}

// talosAnswers reports whether a Talos API completes a TLS handshake at
// addr: in maintenance mode it serves TLS with a self-signed certificate.
func talosAnswers(ctx context.Context, addr string) bool {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a liveness probe of a self-signed maintenance API; nothing is sent.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := d.DialContext(cctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// waitAnswering waits until every node answers or timeout passes; it
// returns the nodes that did not.
func waitAnswering(ctx context.Context, nodes []bootedNode, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	pending := map[string]string{}
	for _, n := range nodes {
		pending[n.Name] = n.Address
	}
	for len(pending) > 0 {
		for name, addr := range pending {
			if talosAnswers(ctx, addr) {
				delete(pending, name)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	var out []string
	for _, n := range nodes {
		if _, ok := pending[n.Name]; ok {
			out = append(out, n.Name)
		}
	}
	return out
}

// finishBoot waits for the nodes, prints them, and registers them when asked.
func (r *rezusctl) finishBoot(c *cli.Context, platform string, nodes []bootedNode) error {
	missing := waitAnswering(c.Context, nodes, c.Duration("wait-timeout"))
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tADDRESS\tTALOS API")
	for _, n := range nodes {
		state := "maintenance"
		for _, m := range missing {
			if m == n.Name {
				state = "not answering"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, n.Role, n.Address, state)
	}
	tw.Flush()
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d machines did not answer on the Talos API within %s (%s): they keep running; see their consoles in %s, or end them with `rezusctl boot stop --platform %s --cluster %s`",
			len(missing), len(nodes), c.Duration("wait-timeout"), strings.Join(missing, ", "), c.String("state-dir"), platform, c.String("cluster"))
	}
	if c.Bool("register") {
		return r.registerBooted(c, nodes)
	}
	fmt.Fprintf(r.env.Stdout, "nodes are in maintenance mode: apply configs with `talosctl apply-config --insecure -n ADDRESS`; `rezusctl boot stop --platform %s --cluster %s` ends them\n", platform, c.String("cluster"))
	return nil
}

// registerBooted creates a Machine per node in the tenant: control planes in
// node group --cp-group, workers in --worker-group, labelled with the boot's
// cluster (select them with a metal node group's selector).
func (r *rezusctl) registerBooted(c *cli.Context, nodes []bootedNode) error {
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant := s.tenant(c)
	if tenant == "" {
		return errors.New("--register needs the tenant (-t) to register the machines in")
	}
	labels := map[string]string{"rezuscloud.io/boot": c.String("cluster")}
	for _, l := range c.StringSlice("label") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--label %q: want key=value", l)
		}
		labels[k] = v
	}
	for _, n := range nodes {
		host, _, err := net.SplitHostPort(n.Address)
		if err != nil {
			return err
		}
		group := c.String("worker-group")
		if n.Role == domain.RoleControlPlane {
			group = c.String("cp-group")
		}
		obj := map[string]any{
			"metadata": map[string]any{"name": n.Name, "labels": labels},
			"spec":     map[string]any{"nodeGroup": group, "role": n.Role, "address": host, "hostname": n.Name},
		}
		body, _ := json.Marshal(obj)
		resp, err := cl.do(c.Context, request{method: http.MethodPost, path: "/api/v1/tenants/" + url.PathEscape(tenant) + "/machines", body: body})
		if err != nil {
			return fmt.Errorf("registering %s: %w", n.Name, err)
		}
		resp.Body.Close()
		fmt.Fprintf(r.env.Stdout, "machine/%s registered in tenant %s (node group %s, address %s)\n", n.Name, tenant, group, host)
	}
	return nil
}

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

// dockerClient talks to the engine API over its unix socket.
type dockerClient struct {
	hc *http.Client
}

func newDockerClient(sock string) *dockerClient {
	return &dockerClient{hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

// call sends a request; out, when set, takes the JSON answer. ok lists the
// statuses besides 2xx that are not errors.
func (d *dockerClient) call(ctx context.Context, method, path string, body, out any, ok ...int) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		for _, s := range ok {
			if resp.StatusCode == s {
				return resp.StatusCode, nil
			}
		}
		var msg struct{ Message string }
		_ = json.Unmarshal(b, &msg)
		return resp.StatusCode, fmt.Errorf("docker %s %s: %s: %s", method, path, resp.Status, msg.Message)
	}
	if out != nil && len(b) > 0 {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

// bootDocker runs each node as a Talos container, as talosctl's docker
// provisioner does: privileged, read-only root, tmpfs /run /system /tmp,
// volumes for the state and /var, PLATFORM=container, on a network of the
// cluster, the Talos API published on a loopback address of its own.
func (r *rezusctl) bootDocker(c *cli.Context, plan bootPlan) error {
	sock, err := dockerSocket(c.String("docker-host"), r.env.Getenv)
	if err != nil {
		return err
	}
	d := newDockerClient(sock)
	image := c.String("image")
	code, err := d.call(c.Context, http.MethodGet, "/images/"+image+"/json", nil, nil, http.StatusNotFound)
	if err != nil && code == 0 {
		return fmt.Errorf("docker engine not reachable at unix://%s (is the docker daemon running?): %w", sock, err)
	}
	switch {
	case code == http.StatusNotFound:
		return fmt.Errorf("docker image %s not found in the engine at unix://%s (docker pull %s)", image, sock, image)
	case err != nil:
		return fmt.Errorf("docker engine at unix://%s: %w", sock, err)
	}
	labels := map[string]string{bootLabel: plan.Cluster}
	if _, err := d.call(c.Context, http.MethodPost, "/networks/create", map[string]any{"Name": plan.Cluster, "Labels": labels, "CheckDuplicate": true}, nil, http.StatusConflict); err != nil {
		return err
	}
	var nodes []bootedNode
	taken := map[string]bool{}
	for _, n := range plan.Nodes {
		host, err := freeLoopback(50000, taken)
		if err != nil {
			return err
		}
		ports := map[string]any{"50000/tcp": []map[string]string{{"HostIp": host, "HostPort": "50000"}}}
		exposed := map[string]any{"50000/tcp": map[string]any{}}
		if n.Role == domain.RoleControlPlane {
			ports["6443/tcp"] = []map[string]string{{"HostIp": host, "HostPort": "6443"}}
			exposed["6443/tcp"] = map[string]any{}
		}
		var mounts []map[string]any
		for _, target := range []string{"/system/state", "/var", "/etc/cni", "/etc/kubernetes", "/usr/libexec/kubernetes", "/opt"} {
			mounts = append(mounts, map[string]any{"Type": "volume", "Target": target})
		}
		body := map[string]any{
			"Image": image, "Hostname": n.Name, "Labels": labels,
			"Env":          []string{"PLATFORM=container"},
			"ExposedPorts": exposed,
			"HostConfig": map[string]any{
				"Privileged": true, "ReadonlyRootfs": true, "SecurityOpt": []string{"seccomp=unconfined"},
				"Tmpfs":        map[string]string{"/run": "rw", "/system": "rw", "/tmp": "rw"},
				"Mounts":       mounts,
				"PortBindings": ports,
				"NetworkMode":  plan.Cluster,
			},
		}
		var created struct {
			ID string `json:"Id"`
		}
		if _, err := d.call(c.Context, http.MethodPost, "/containers/create?name="+url.QueryEscape(n.Name), body, &created); err != nil {
			return err
		}
		if _, err := d.call(c.Context, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil, http.StatusNotModified); err != nil {
			return err
		}
		nodes = append(nodes, bootedNode{Name: n.Name, Role: n.Role, Address: net.JoinHostPort(host, "50000"), ID: created.ID})
	}
	fmt.Fprintf(r.env.Stderr, "started %d Talos containers (%s) on network %s\n", len(nodes), image, plan.Cluster)
	return r.finishBoot(c, "docker", nodes)
}

// bootStopCommand ends what `boot` started on a real platform.
func (r *rezusctl) bootStopCommand() *cli.Command {
	return &cli.Command{
		Name:  "stop",
		Usage: "end the QEMU machines or Docker containers `rezusctl boot` started",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "platform", Value: "qemu", Usage: "qemu or docker"},
			&cli.StringFlag{Name: "cluster", Value: "demo", Usage: "name prefix of the machines"},
			&cli.StringFlag{Name: "state-dir", Usage: "qemu: where the machines' disks and record are (default under $XDG_STATE_HOME or ~/.local/state)"},
			&cli.BoolFlag{Name: "purge", Usage: "qemu: remove the disks and consoles too"},
			&cli.StringFlag{Name: "docker-host", Usage: "docker: engine socket (default: $DOCKER_HOST, else unix:///var/run/docker.sock)"},
		},
		Action: func(c *cli.Context) error {
			switch c.String("platform") {
			case "qemu":
				dir, err := r.bootStateDir(c, c.String("cluster"))
				if err != nil {
					return err
				}
				rec, err := readBootRecord(dir)
				if err != nil {
					return err
				}
				for _, n := range rec.Nodes {
					stopPID(n.PID)
					_ = os.Remove(filepath.Join(dir, n.Name+".pid"))
					fmt.Fprintf(r.env.Stdout, "%s stopped\n", n.Name)
				}
				if c.Bool("purge") {
					return os.RemoveAll(dir)
				}
				return os.Remove(filepath.Join(dir, "nodes.json"))
			case "docker":
				sock, err := dockerSocket(c.String("docker-host"), r.env.Getenv)
				if err != nil {
					return err
				}
				d := newDockerClient(sock)
				filters, _ := json.Marshal(map[string][]string{"label": {bootLabel + "=" + c.String("cluster")}})
				var list []struct {
					ID    string `json:"Id"`
					Names []string
				}
				if _, err := d.call(c.Context, http.MethodGet, "/containers/json?all=1&filters="+url.QueryEscape(string(filters)), nil, &list); err != nil {
					return err
				}
				for _, ctr := range list {
					if _, err := d.call(c.Context, http.MethodDelete, "/containers/"+ctr.ID+"?force=1&v=1", nil, nil, http.StatusNotFound); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "%s removed\n", strings.TrimPrefix(strings.Join(ctr.Names, ","), "/"))
				}
				_, err = d.call(c.Context, http.MethodDelete, "/networks/"+url.PathEscape(c.String("cluster")), nil, nil, http.StatusNotFound)
				return err
			default:
				return fmt.Errorf("--platform must be qemu or docker, not %q", c.String("platform"))
			}
		},
	}
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
