package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
