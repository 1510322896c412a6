package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// startAutoscaler issues the tenant an autoscaler certificate, writes the
// files `rezusctl autoscaler config` writes and runs the cluster-autoscaler
// with the e2e test's flags; it waits until the autoscaler's main loop ran.
func (r *autoscaleRun) startAutoscaler(ctx context.Context, bin string, scan, unneeded time.Duration) (func(), error) {
	code, b, err := r.env.request(ctx, http.MethodPost, "/api/v1/tenants/"+r.tenant+"/autoscaler/certificates", "application/json", `{"validity":"24h"}`)
	if err != nil || code != http.StatusCreated {
		return nil, fmt.Errorf("issuing an autoscaler certificate: %d %s %v", code, b, err)
	}
	var creds struct{ Certificate, Key, CA, Endpoint string }
	if err := json.Unmarshal(b, &creds); err != nil {
		return nil, err
	}
	files := map[string]string{"tls.crt": creds.Certificate, "tls.key": creds.Key, "ca.crt": creds.CA,
		"cloud-config": fmt.Sprintf("address: %q\ncert: %q\nkey: %q\ncacert: %q\ngrpc_timeout: 10s\n", creds.Endpoint,
			filepath.Join(r.dir, "tls.crt"), filepath.Join(r.dir, "tls.key"), filepath.Join(r.dir, "ca.crt"))}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	addr, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	r.caLog = filepath.Join(r.dir, "cluster-autoscaler.log")
	logf, err := os.Create(r.caLog)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin,
		"--cloud-provider=externalgrpc", "--cloud-config="+filepath.Join(r.dir, "cloud-config"),
		"--kubeconfig="+filepath.Join(r.dir, "kubeconfig"), "--namespace=kube-system", "--leader-elect=false",
		"--address="+addr[0], "--scan-interval="+scan.String(), "--expander=random",
		"--scale-down-unneeded-time="+unneeded.String(), "--scale-down-delay-after-add=10s", "--scale-down-delay-after-delete=0s",
		"--scale-down-delay-after-failure=10s", "--max-node-provision-time=4m", "--new-pod-scale-up-delay=0s",
		"--skip-nodes-with-system-pods=false", "--skip-nodes-with-local-storage=false", "--max-graceful-termination-sec=5",
		// A node whose pods had nowhere to go (the gpu pod) is looked at
		// again after this, not the default 5 minutes.
		"--unremovable-node-recheck-timeout=10s",
		"--v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	exited, stop, err := startChild(cmd, os.Interrupt, 10*time.Second, func() { logf.Close() })
	if err != nil {
		logf.Close()
		return nil, err
	}
	// Its main loop sets cluster_autoscaler_last_activity{activity="main"}.
	err = r.env.waitFor(ctx, 2*time.Minute, func() (bool, error) {
		select {
		case <-exited:
			return false, errors.New("the cluster-autoscaler exited")
		default:
		}
		resp, err := http.Get("http://" + addr[0] + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `cluster_autoscaler_last_activity{activity="main"}`), nil
	})
	if err != nil {
		r.tailLog()
		stop()
		return nil, fmt.Errorf("the cluster-autoscaler's main loop: %w", err)
	}
	fmt.Printf("  cluster-autoscaler running (log %s)\n", r.caLog)
	return stop, nil
}

// tailLog prints the end of the autoscaler's log, for a failure.
func (r *autoscaleRun) tailLog() {
	if r.caLog == "" {
		return
	}
	f, err := os.Open(r.caLog)
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 60 {
			lines = lines[1:]
		}
	}
	fmt.Fprintf(os.Stderr, "cluster-autoscaler log (tail):\n%s\n", strings.Join(lines, "\n"))
}
