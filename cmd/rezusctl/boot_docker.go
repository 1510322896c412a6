package main

// Booting real Talos machines as Docker containers, with the flags
// talosctl's docker provisioner uses (boot_real.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

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
