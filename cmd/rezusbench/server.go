package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// startBenchServer runs `exe serve` as a child process on dir, with the
// embedded NATS on loopback, and waits until it is ready.
func startBenchServer(ctx context.Context, exe, dir, profile, memLimit string, extra ...string) (*benchEnv, func(), error) {
	httpAddr, natsAddr, err := twoFreePorts()
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	token := hex.EncodeToString(buf)
	args := []string{"serve", "--listen", httpAddr, "--data-dir", dir, "--nats-listen", natsAddr, "--admin-token", token, "--log-level", "warn"}
	if profile != "" {
		args = append(args, "--cpu-profile", profile+".cpu", "--mem-profile", profile+".heap")
	}
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	cmd.Env = os.Environ()
	if memLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+memLimit)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	}
	env := &benchEnv{url: "http://" + httpAddr, token: token, pid: cmd.Process.Pid,
		http: &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := env.http.Get(env.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("bench: server not ready in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	env.nc, err = nats.Connect("nats://"+natsAddr, nats.UserCredentials(eventstore.ServerCredentialsPath(dir)))
	if err != nil {
		stop()
		return nil, nil, err
	}
	env.js, _ = jetstream.New(env.nc)
	return env, func() { env.nc.Close(); stop() }, nil
}

func twoFreePorts() (string, string, error) {
	var addrs []string
	var lns []net.Listener
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs[0], addrs[1], nil
}

type benchEnv struct {
	url   string
	token string
	http  *http.Client
	js    jetstream.JetStream
	nc    *nats.Conn
	pid   int
	// created[prefix][client] is how many tenants that client created, so
	// updates touch only tenants that exist.
	created map[string][]int
}

func (e *benchEnv) request(ctx context.Context, method, path, ctype, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	if body != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (e *benchEnv) count(ctx context.Context, path string) (int, error) {
	code, b, err := e.request(ctx, http.MethodGet, path, "", "")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("list %s: %d", path, code)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// expect POSTs body to path and fails unless the answer has the wanted code.
func (e *benchEnv) expect(ctx context.Context, code int, path, body string) error {
	got, b, err := e.request(ctx, http.MethodPost, path, "application/json", body)
	if err == nil && got != code {
		err = fmt.Errorf("POST %s: %d %s", path, got, b)
	}
	return err
}
