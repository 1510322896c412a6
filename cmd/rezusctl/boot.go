package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/talos/emulator"
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
			"addresses; --platform docker and --platform qemu check the engine and the image, then print\n" +
			"the commands that boot the same plan as real Talos machines.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "platform", Value: "emulated", Usage: "emulated, docker or qemu"},
			&cli.StringFlag{Name: "cluster", Value: "demo", Usage: "name prefix of the machines"},
			&cli.IntFlag{Name: "control-planes", Value: 1, Usage: "number of control-plane machines"},
			&cli.IntFlag{Name: "workers", Value: 0, Usage: "number of worker machines"},
			&cli.StringFlag{Name: "state-dir", Usage: "emulated: persist the nodes in `DIR`, so a rerun brings them back"},
			&cli.StringFlag{Name: "addressing", Usage: "emulated: loopback (127.0.N.M:50000) or ports; default: loopback where possible"},
			&cli.StringFlag{Name: "listen", Usage: "emulated: serve the emulator's HTTP API on `ADDR` (e.g. 127.0.0.1:8099)"},
			&cli.StringFlag{Name: "image", Value: defaultTalosImage, Usage: "docker: the Talos container `IMAGE`"},
			&cli.StringFlag{Name: "docker-host", Usage: "docker: engine socket (default: $DOCKER_HOST, else unix:///var/run/docker.sock)"},
			&cli.StringFlag{Name: "iso", Usage: "qemu: `PATH` of the Talos ISO (metal-amd64.iso)"},
			&cli.StringFlag{Name: "qemu-binary", Value: "qemu-system-x86_64", Usage: "qemu: the emulator binary"},
		},
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
	em, err := emulator.New(emulator.Config{
		StateDir:   c.String("state-dir"),
		Addressing: emulator.Addressing(c.String("addressing")),
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
		fmt.Fprintf(r.env.Stdout, "emulator API: http://%s/v1/nodes\n", lis.Addr())
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

// bootDocker checks that the engine answers and holds the image, then prints
// the plan as docker commands.
func (r *rezusctl) bootDocker(c *cli.Context, plan bootPlan) error {
	sock, err := dockerSocket(c.String("docker-host"), r.env.Getenv)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	image := c.String("image")
	req, err := http.NewRequestWithContext(c.Context, http.MethodGet, "http://docker/images/"+image+"/json", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("docker engine not reachable at unix://%s (is the docker daemon running?): %w", sock, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return fmt.Errorf("docker image %s not found in the engine at unix://%s (docker pull %s)", image, sock, image)
	default:
		return fmt.Errorf("docker engine at unix://%s answered %s for image %s", sock, resp.Status, image)
	}
	fmt.Fprintf(r.env.Stdout, "docker network create %s\n", plan.Cluster)
	for _, n := range plan.Nodes {
		fmt.Fprintf(r.env.Stdout, "docker run -d --name %s --hostname %s --network %s --privileged --read-only "+
			"--security-opt seccomp=unconfined --mount type=tmpfs,destination=/run --mount type=tmpfs,destination=/system "+
			"--mount type=tmpfs,destination=/tmp --mount type=volume,destination=/var -e PLATFORM=container %s\n",
			n.Name, n.Name, plan.Cluster, image)
	}
	return nil
}

// bootQEMU checks the qemu binary and the ISO, then prints the plan as qemu commands.
func (r *rezusctl) bootQEMU(c *cli.Context, plan bootPlan) error {
	bin, err := exec.LookPath(c.String("qemu-binary"))
	if err != nil {
		return fmt.Errorf("qemu not found (%s): install qemu-system-x86_64 or give --qemu-binary: %w", c.String("qemu-binary"), err)
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
	for i, n := range plan.Nodes {
		mem := "2048"
		if n.Role == "controlplane" {
			mem = "4096"
		}
		fmt.Fprintf(r.env.Stdout, "%s -name %s -m %s -smp 2 -cdrom %s -drive file=%s.qcow2,if=virtio,format=qcow2 "+
			"-netdev user,id=n0,hostfwd=tcp:127.0.0.1:%d-:50000 -device virtio-net-pci,netdev=n0 -nographic\n",
			bin, n.Name, mem, iso, n.Name, 50000+i)
	}
	return nil
}
