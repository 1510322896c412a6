package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/emulator"
)

// bootNode is one machine of a boot plan.
type bootNode struct {
	Name string
	Role string // "controlplane" or "worker"
}

// bootPlan is the machines `rezusctl boot` brings up, the same whichever
// platform runs them.
type bootPlan struct {
	Cluster string
	Nodes   []bootNode
}

func newBootPlan(cluster string, controlPlanes, workers int) (bootPlan, error) {
	if controlPlanes < 1 {
		return bootPlan{}, errors.New("--control-planes must be at least 1")
	}
	if workers < 0 {
		return bootPlan{}, errors.New("--workers must not be negative")
	}
	p := bootPlan{Cluster: cluster}
	for i := 1; i <= controlPlanes; i++ {
		p.Nodes = append(p.Nodes, bootNode{Name: fmt.Sprintf("%s-cp-%d", cluster, i), Role: "controlplane"})
	}
	for i := 1; i <= workers; i++ {
		p.Nodes = append(p.Nodes, bootNode{Name: fmt.Sprintf("%s-worker-%d", cluster, i), Role: "worker"})
	}
	return p, nil
}

const defaultTalosImage = "ghcr.io/siderolabs/talos:v1.13.0"

func (r *rezusctl) bootCommand() *cli.Command {
	return &cli.Command{
		Name:  "boot",
		Usage: "boot Talos machines in maintenance mode, ready for a config (standalone: no server needed)",
		Description: "--platform emulated runs emulated Talos nodes in this process until Ctrl-C and prints their\n" +
			"addresses; --platform qemu starts one QEMU machine per node from a Talos ISO (disks made with\n" +
			"qemu-img, the Talos API forwarded to a loopback address per node, KVM when available), and\n" +
			"--platform docker one Talos container per node (talosctl's docker flags); both wait until\n" +
			"each answers in maintenance mode, print the addresses, and keep running until\n" +
			"`rezusctl boot stop`. --register makes the nodes Machines of a tenant (-t).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "platform", Value: "emulated", Usage: "emulated, docker or qemu"},
			&cli.StringFlag{Name: "cluster", Value: "demo", Usage: "name prefix of the machines"},
			&cli.IntFlag{Name: "control-planes", Value: 1, Usage: "number of control-plane machines"},
			&cli.IntFlag{Name: "workers", Value: 0, Usage: "number of worker machines"},
			&cli.StringFlag{Name: "state-dir", Usage: "emulated: persist the nodes in `DIR`, so a rerun brings them back"},
			&cli.StringFlag{Name: "addressing", Usage: "emulated: loopback (127.0.N.M:50000) or ports; default: loopback where possible"},
			&cli.StringFlag{Name: "listen", Usage: "emulated: serve the emulator's HTTP API on `ADDR` (e.g. 127.0.0.1:8099); it prints the bearer token the API needs"},
			&cli.StringFlag{Name: "kube", Value: "auto", Usage: "emulated: run the real Kubernetes control plane on control planes and an emulated kubelet on every node: on, off, or auto (on when `go tool task tools` built them into --kube-tools)"},
			&cli.StringFlag{Name: "kube-tools", Value: ".tools", Usage: "emulated: where hack/kube.sh built etcd and the Kubernetes binaries"},
			&cli.StringFlag{Name: "image", Value: defaultTalosImage, Usage: "docker: the Talos container `IMAGE`"},
			&cli.StringFlag{Name: "docker-host", Usage: "docker: engine socket (default: $DOCKER_HOST, else unix:///var/run/docker.sock)"},
			&cli.StringFlag{Name: "iso", Usage: "qemu: `PATH` of the Talos ISO (metal-amd64.iso)"},
			&cli.StringFlag{Name: "qemu-binary", Value: "qemu-system-x86_64", Usage: "qemu: the emulator binary"},
			&cli.StringFlag{Name: "qemu-img", Value: "qemu-img", Usage: "qemu: the disk image tool"},
			&cli.StringFlag{Name: "disk-size", Value: "10G", Usage: "qemu: each machine's disk"},
			&cli.IntFlag{Name: "cpus", Value: 2, Usage: "qemu: each machine's CPUs"},
			&cli.StringFlag{Name: "memory-controlplane", Value: "2048", Usage: "qemu: a control plane's memory (MiB)"},
			&cli.StringFlag{Name: "memory-worker", Value: "2048", Usage: "qemu: a worker's memory (MiB)"},
			&cli.DurationFlag{Name: "wait-timeout", Value: 5 * time.Minute, Usage: "qemu, docker: how long to wait for the Talos APIs to answer"},
			&cli.BoolFlag{Name: "register", Usage: "register the nodes as Machines of the tenant (-t), once they answer"},
			tenantFlag(),
			&cli.StringFlag{Name: "cp-group", Value: "cp", Usage: "with --register: the node group of the control planes"},
			&cli.StringFlag{Name: "worker-group", Value: "workers", Usage: "with --register: the node group of the workers"},
			&cli.StringSliceFlag{Name: "label", Usage: "with --register: a `key=value` label of the Machines (repeatable)"},
		},
		Subcommands: []*cli.Command{r.bootStopCommand()},
		Action: func(c *cli.Context) error {
			plan, err := newBootPlan(c.String("cluster"), c.Int("control-planes"), c.Int("workers"))
			if err != nil {
				return err
			}
			switch c.String("platform") {
			case "emulated":
				return r.bootEmulated(c, plan)
			case "docker":
				return r.bootDocker(c, plan)
			case "qemu":
				return r.bootQEMU(c, plan)
			default:
				return fmt.Errorf("--platform must be emulated, docker or qemu, not %q", c.String("platform"))
			}
		},
	}
}

// bootEmulated runs the plan as emulated nodes until the command is cancelled.
func (r *rezusctl) bootEmulated(c *cli.Context, plan bootPlan) error {
	kube, err := emulator.KubeFromMode(c.String("kube"), optionalAbsPath(c.String("kube-tools")))
	if err != nil {
		return fmt.Errorf("--kube=%s: %w", c.String("kube"), err)
	}
	if kube != nil {
		fmt.Fprintf(r.env.Stdout, "control planes run etcd and Kubernetes (%s) from %s\n", strings.Join(emulator.KubeVersions(kube.ToolsDir), ", "), kube.ToolsDir)
	}
	em, err := emulator.New(emulator.Config{
		StateDir:   optionalAbsPath(c.String("state-dir")),
		Addressing: emulator.Addressing(c.String("addressing")),
		// The nodes are for talosctl and RezusCloud to drive.
		ShutdownDelay: emulator.InteractiveShutdownDelay,
		Kube:          kube,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	select {
	case <-em.Ready():
	case err := <-done:
		return err
	}
	if addr := c.String("listen"); addr != "" {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("serving the emulator API: %w", err)
		}
		srv := &http.Server{Handler: em.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(lis)                        //nolint:errcheck // ends with Shutdown.
		defer srv.Shutdown(context.Background()) //nolint:errcheck
		// The token is the caller's to use (the emulated provider reads it
		// as EMULATOR_TOKEN); kept in the state dir when there is one.
		fmt.Fprintf(r.env.Stdout, "emulator API: http://%s/v1/nodes (Authorization: Bearer %s)\n", lis.Addr(), em.APIToken())
	}
	for _, n := range plan.Nodes {
		if _, err := em.Get(n.Name); err == nil {
			continue // restored from --state-dir
		}
		if _, err := em.Create(ctx, emulator.NodeSpec{Name: n.Name, Cluster: plan.Cluster}); err != nil {
			cancel()
			<-done
			return err
		}
	}
	roles := map[string]string{}
	for _, n := range plan.Nodes {
		roles[n.Name] = n.Role
	}
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tADDRESS\tPHASE")
	for _, st := range em.List() {
		role := roles[st.Name]
		if st.Role != "" {
			role = st.Role
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", st.Name, role, st.Address, st.Phase)
	}
	tw.Flush()
	if c.Bool("register") {
		var nodes []bootedNode
		for _, st := range em.List() {
			if _, port, _ := net.SplitHostPort(st.Address); port != "50000" {
				cancel()
				<-done
				return fmt.Errorf("--register needs each node on the Talos API port (loopback addressing); %s is at %s", st.Name, st.Address)
			}
			nodes = append(nodes, bootedNode{Name: st.Name, Role: roles[st.Name], Address: st.Address})
		}
		if err := r.registerBooted(c, nodes); err != nil {
			cancel()
			<-done
			return err
		}
	}
	fmt.Fprintln(r.env.Stdout, "nodes are in maintenance mode: apply configs with `talosctl apply-config --insecure -n ADDRESS`; Ctrl-C stops them")
	if err := <-done; err != nil {
		return err
	}
	return c.Context.Err() // Ctrl-C: exit 130, like every interrupted command
}

// dockerSocket resolves the engine address to a unix socket path.
func dockerSocket(flag string, getenv func(string) string) (string, error) {
	host := flag
	if host == "" && getenv != nil {
		host = getenv("DOCKER_HOST")
	}
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(host)
	if err != nil || u.Scheme != "unix" {
		return "", fmt.Errorf("docker engine %q: only unix:// sockets are supported", host)
	}
	return u.Path, nil
}
