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
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/freeport"
)

// startBenchServer runs `exe serve` as a child process on dir, with the
// embedded NATS on loopback, and waits until it is ready.
func startBenchServer(ctx context.Context, exe, dir, profile, memLimit string, extra ...string) (*benchEnv, func(), error) {
	return startBenchCluster(ctx, exe, dir, 1, profile, memLimit, extra...)
}

// startBenchCluster runs nodes `exe serve` processes; with more than one,
// they form an embedded NATS cluster on loopback (streams at min(3, nodes)
// replicas), each under dir/node<i>, sharing a secrets key written in dir.
// Requests go to the replicas round robin; the raw JetStream phase and the
// RSS figure use the first.
func startBenchCluster(ctx context.Context, exe, dir string, nodes int, profile, memLimit string, extra ...string) (*benchEnv, func(), error) {
	if nodes < 1 {
		return nil, nil, fmt.Errorf("--cluster %d: want at least 1", nodes)
	}
	addrs, err := freePorts(3 * nodes)
	if err != nil {
		return nil, nil, err
	}
	httpAddrs, natsAddrs, routes := addrs[:nodes], addrs[nodes:2*nodes], addrs[2*nodes:]
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	token := hex.EncodeToString(buf)
	dirs := []string{dir}
	var clusterArgs [][]string
	if nodes > 1 {
		key := filepath.Join(dir, "cluster-secrets.key")
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		if err := os.WriteFile(key, secret, 0o600); err != nil {
			return nil, nil, err
		}
		dirs = nil
		for i := range nodes {
			var peers []string
			for j, r := range routes {
				if j != i {
					peers = append(peers, r)
				}
			}
			dirs = append(dirs, filepath.Join(dir, fmt.Sprintf("node%d", i)))
			clusterArgs = append(clusterArgs, []string{"--cluster-name", "bench", "--cluster-listen", routes[i],
				"--peers", strings.Join(peers, ","), "--secrets-key-file", key})
		}
	}
	var cmds []*exec.Cmd
	stop := func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(os.Interrupt)
		}
		for _, cmd := range cmds {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
			}
		}
	}
	env := &benchEnv{token: token, http: &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}}
	for i := range nodes {
		args := []string{"serve", "--listen", httpAddrs[i], "--data-dir", dirs[i], "--nats-listen", natsAddrs[i], "--admin-token", token, "--log-level", "warn"}
		if profile != "" && i == 0 {
			args = append(args, "--cpu-profile", profile+".cpu", "--mem-profile", profile+".heap")
		}
		if nodes > 1 {
			args = append(args, clusterArgs[i]...)
		}
		args = append(args, extra...)
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Stderr = os.Stderr
		cmd.Env = os.Environ()
		if memLimit != "" {
			cmd.Env = append(cmd.Env, "GOMEMLIMIT="+memLimit)
		}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		cmds = append(cmds, cmd)
		env.urls = append(env.urls, "http://"+httpAddrs[i])
	}
	env.pid = cmds[0].Process.Pid
	for _, cmd := range cmds {
		env.pids = append(env.pids, cmd.Process.Pid)
	}
	deadline := time.Now().Add(30 * time.Second * time.Duration(nodes))
	for _, url := range env.urls {
		for {
			resp, err := env.http.Get(url + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				stop()
				return nil, nil, fmt.Errorf("bench: server %s not ready in time", url)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	creds, err := eventstore.MintCredentials(dirs[0], "rezusbench", 24*time.Hour)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "bench.creds"), creds, 0o600)
	}
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("bench: credentials for the server's NATS: %w", err)
	}
	env.nc, err = nats.Connect("nats://"+natsAddrs[0], nats.UserCredentials(filepath.Join(dir, "bench.creds")))
	if err != nil {
		stop()
		return nil, nil, err
	}
	env.js, _ = jetstream.New(env.nc)
	env.replicas = min(3, nodes)
	return env, func() { env.nc.Close(); stop() }, nil
}

// freePorts are n loopback addresses for the replicas' listeners, whose
// peers must know them before they start (freeport).
func freePorts(n int) ([]string, error) {
	ports, err := freeport.Loopback(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs, nil
}

type benchEnv struct {
	// urls are the replicas' HTTP addresses; requests take them round robin.
	urls []string
	next atomic.Uint64
	// replicas of the raw phase's stream, as the server's.
	replicas int
	token    string
	http     *http.Client
	js       jetstream.JetStream
	nc       *nats.Conn
	pid      int
	// pids are every replica's process, in the order of urls.
	pids []int
	// created[prefix][client] is how many tenants that client created, so
	// updates touch only tenants that exist.
	created map[string][]int
}

// request sends one request; an answer of 503 with Retry-After (a replica
// whose read model is behind, a cluster electing a leader) is retried after
// the pause it asks for, as a client would, a few times; the wait counts in
// the request's latency.
func (e *benchEnv) request(ctx context.Context, method, path, ctype, body string) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		code, b, retryAfter, err := e.requestOnce(ctx, method, path, ctype, body)
		if err != nil || code != http.StatusServiceUnavailable || retryAfter == "" || attempt == 4 {
			return code, b, err
		}
		secs, _ := strconv.Atoi(retryAfter)
		select {
		case <-ctx.Done():
			return code, b, ctx.Err()
		case <-time.After(time.Duration(max(secs, 1)) * time.Second):
		}
	}
}

func (e *benchEnv) requestOnce(ctx context.Context, method, path, ctype, body string) (int, []byte, string, error) {
	url := e.urls[int(e.next.Add(1)%uint64(len(e.urls)))]
	req, err := http.NewRequestWithContext(ctx, method, url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	if body != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header.Get("Retry-After"), err
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
