//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/internal/release"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// replicaSet is the three replicas as they are replaced: whoever writes
// or watches asks it for the replica at an index.
type replicaSet struct {
	mu sync.Mutex
	ps [3]*proc
	// last are the replicas running the last release (0.1.0).
	last map[*proc]bool
}

// ofLastRelease reports whether p runs the last release.
func (r *replicaSet) ofLastRelease(p *proc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[p]
}

func (r *replicaSet) at(i int) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ps[i%3]
}

func (r *replicaSet) set(i int, p *proc) {
	r.mu.Lock()
	r.ps[i] = p
	r.mu.Unlock()
}

// rollingWriter creates providers one after another, each with its own
// Idempotency-Key, and retries a write only on what a client is told to
// retry: no answer (the replica is going or gone), 429 and 503, on the
// next replica with the same key. It records every acknowledged write and
// every answer it could not retry.
type rollingWriter struct {
	rs     *replicaSet
	client *http.Client

	mu       sync.Mutex
	acked    []string
	refused  []string
	retries  int
	lateAcks int // 409 on a retry: an earlier attempt was stored, its answer lost
	// lastRelease500 are 500s of a 0.1.0 replica stopping: 0.1.0 answers a
	// request its closing NATS connection fails with 500, which 0.2.0
	// answers 503 (handlers.toDomainError); the last release cannot be
	// fixed, so they are counted and retried, not refused.
	lastRelease500 int
}

func (w *rollingWriter) run(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("w-%05d", n)
		w.write(ctx, n, name)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // a steady client, not a flood
		}
	}
}

func (w *rollingWriter) write(ctx context.Context, n int, name string) {
	body := `{"metadata":{"name":"` + name + `"},"spec":{"type":"metal"}}`
	for attempt := 0; ; attempt++ {
		p := w.rs.at(n + attempt)
		req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, p.url+"/api/v1/providers", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", name)
		resp, err := w.client.Do(req)
		code, answer := 0, ""
		if err == nil {
			var st struct{ Reason, Message string }
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			code, answer = resp.StatusCode, st.Reason+": "+st.Message
		}
		w.mu.Lock()
		switch {
		case code == http.StatusCreated:
			w.acked = append(w.acked, name)
		case code == http.StatusConflict && attempt > 0:
			// The name is this writer's alone: an earlier attempt of
			// this write was stored and its answer lost with the replica.
			w.acked = append(w.acked, name)
			w.lateAcks++
		case code == http.StatusInternalServerError && w.rs.ofLastRelease(p):
			w.lastRelease500++
			w.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			continue
		case err != nil || code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests:
			w.retries++
			w.mu.Unlock()
			if attempt > 600 {
				w.mu.Lock()
				w.refused = append(w.refused, fmt.Sprintf("%s: no replica took it in %d tries: %v %d %s", name, attempt, err, code, answer))
				w.mu.Unlock()
				return
			}
			time.Sleep(100 * time.Millisecond) // a client's pause before its retry
			continue
		default:
			w.refused = append(w.refused, fmt.Sprintf("%s on %s: %d %s", name, p.url, code, answer))
		}
		w.mu.Unlock()
		return
	}
}

// rollingWatch follows the providers from resourceVersion rv as a client
// does, on the replica at index 0, then 1, 2, 0...: when a watch ends it
// opens the next one from the last version it got (an event's or a
// BOOKMARK's). It records every event and how each watch ended.
type rollingWatch struct {
	rs *replicaSet

	mu     sync.Mutex
	events []watchEvent
	// ends says for each ended watch whether its last frame was a BOOKMARK.
	ends []bool
	errs []string
}

func (w *rollingWatch) run(ctx context.Context, rv uint64) {
	for i := 0; ctx.Err() == nil; i++ {
		bookmarked, err := w.watch(ctx, w.rs.at(i), &rv)
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.ends = append(w.ends, bookmarked)
		if err != nil {
			w.errs = append(w.errs, err.Error())
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *rollingWatch) watch(ctx context.Context, p *proc, rv *uint64) (bookmarked bool, err error) {
	var resp *http.Response
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/providers?watch=true&resourceVersion=%d", p.url, *rv), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err = http.DefaultClient.Do(req); err != nil {
			return false, nil // the replica is gone: next one
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			break
		}
		resp.Body.Close() // catching up: retry, as told
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("watch on %s: %s", p.url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type   string
			Object struct {
				Metadata struct{ Name, ResourceVersion string }
				Reason   string
			}
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return false, fmt.Errorf("a watch frame that is not JSON: %w", err)
		}
		seq, _ := strconv.ParseUint(ev.Object.Metadata.ResourceVersion, 10, 64)
		bookmarked = ev.Type == "BOOKMARK"
		switch ev.Type {
		case "BOOKMARK":
			*rv = max(*rv, seq)
		case "ADDED", "MODIFIED", "DELETED":
			w.mu.Lock()
			w.events = append(w.events, watchEvent{Type: ev.Type, Name: ev.Object.Metadata.Name, RV: seq})
			w.mu.Unlock()
			*rv = seq
		default:
			return false, fmt.Errorf("watch on %s: %s event: %s", p.url, ev.Type, data)
		}
	}
	return bookmarked, nil
}

// rejoin is one replica's replacement: how long its process took to exit
// after SIGTERM and the new one from its start to /readyz.
type rejoin struct {
	replica    int
	from, to   string
	exit, read time.Duration
}

// TestRollingUpgradeFromTheLastRelease runs three replicas of release 0.1.0
// forming their own NATS cluster, with a client writing through all three,
// a client watching, an apply and a Talos upgrade running, and replaces
// each replica in turn by the current build (SIGTERM, wait for the exit,
// start the new binary on the same data dir and flags, wait for /readyz);
// then replaces each again by the current build, now a lame duck.
// Every acknowledged write is stored exactly once (its history has one
// Created), no answer was one a client may not retry, the watcher saw every
// write once and in order across its resumptions, the watches the lame
// ducks ended ended with a BOOKMARK, and the apply and the upgrade finished
// once. It logs each replica's rejoin (start to /readyz), not asserting
// it: the machine is shared.
func TestRollingUpgradeFromTheLastRelease(t *testing.T) {
	t.Parallel()
	oneHeavyTest(t)
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	prevVersion, prevCommit, err := release.Previous(root)
	require.NoError(t, err)
	old := release.Server(t, prevVersion, prevCommit)
	cur := currentBinary(t)
	tofu, mirror := tofutest.Tools(t)
	emu, emuToken := startKubeEmulator(t)
	c := newTestCluster(t)
	infra := []string{"--tofu", tofu, "--provider-mirror", mirror, "--apply-debounce", "1500ms", "--resync", "0"}
	start := func(i int, bin string) *proc {
		return launchBinary(t, bin, c.dirs[i], c.flags(i, infra...)...)
	}
	rs := &replicaSet{last: map[*proc]bool{}}
	began := time.Now()
	for i := range 3 {
		p := start(i, old)
		rs.last[p] = true
		rs.set(i, p)
	}
	for i := range 3 {
		t.Logf("0.1.0 replica %d ready %s after the three started together", i, readyWithin(rs.at(i), began).Round(time.Millisecond))
	}
	p := rs.at(0)
	addEmulatedProvider(t, p, emu, emuToken)

	// A tenant to upgrade, built on 0.1.0.
	createCluster(t, p, "phoenix", 1)
	p.settled("phoenix", 2)
	p.eventually(2*time.Minute, "phoenix is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/phoenix/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})

	// The writer and the watcher, from the present.
	_, list := p.do(http.MethodGet, "/api/v1/providers", "")
	listRV, err := strconv.ParseUint(list["metadata"].(map[string]any)["resourceVersion"].(string), 10, 64)
	require.NoError(t, err)
	writer := &rollingWriter{rs: rs, client: &http.Client{Timeout: 30 * time.Second}}
	watcher := &rollingWatch{rs: rs}
	writeCtx, stopWriting := context.WithCancel(context.Background())
	watchCtx, stopWatching := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	clients.Add(2)
	go func() { defer clients.Done(); writer.run(writeCtx) }()
	go func() { defer clients.Done(); watcher.run(watchCtx, listRV) }()
	t.Cleanup(func() { stopWriting(); stopWatching(); clients.Wait() })
	ackedCount := func() int {
		writer.mu.Lock()
		defer writer.mu.Unlock()
		return len(writer.acked)
	}

	// The upgrade and an apply, running while the replicas are replaced.
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/phoenix", `{"spec":{"talosVersion":"v1.13.1"}}`))
	createCluster(t, p, "apollo", 1)
	p.eventually(time.Minute, "the upgrade and the apply started", func() bool {
		as := p.applies("apollo")
		return len(p.upgrades("phoenix")) == 1 && len(as) > 0
	})

	var rejoins []rejoin
	replace := func(i int, from, to string, bin string) {
		before := ackedCount()
		gone := rs.at(i)
		stopped := time.Now()
		require.NoError(t, gone.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-gone.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("replica %d did not exit within 2 minutes of SIGTERM", i)
		}
		exit := time.Since(stopped)
		started := time.Now()
		p := start(i, bin)
		p.waitAddress() // before the writer and the watcher may pick it
		rs.set(i, p)
		ready := readyWithin(p, started)
		rejoins = append(rejoins, rejoin{replica: i, from: from, to: to, exit: exit, read: ready})
		t.Logf("replica %d %s -> %s: exited %s after SIGTERM, ready %s after its start", i, from, to,
			exit.Round(time.Millisecond), ready.Round(time.Millisecond))
		// Writes go on between replacements.
		p.eventually(time.Minute, "writes acknowledged after the replacement", func() bool { return ackedCount() >= before+20 })
	}
	for i := range 3 {
		replace(i, "0.1.0", "current", cur)
	}
	for i := range 3 {
		replace(i, "current", "current (lame duck)", cur)
	}
	stopWriting()
	for _, r := range rejoins {
		t.Logf("rejoin: replica %d %s -> %s: exit %s, start to /readyz %s", r.replica, r.from, r.to, r.exit.Round(time.Millisecond), r.read.Round(time.Millisecond))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", rs.at(0).raw("/api/v1/tenants/phoenix/upgrades"))
			t.Logf("applies: %s", rs.at(0).raw("/api/v1/tenants/apollo/applies"))
		}
	})

	// The writes: none refused, every acknowledged one stored once.
	writer.mu.Lock()
	acked, refused := append([]string(nil), writer.acked...), writer.refused
	t.Logf("writes: %d acknowledged (%d after a lost answer), %d retries, %d 500s of a stopping 0.1.0 replica",
		len(acked), writer.lateAcks, writer.retries, writer.lastRelease500)
	writer.mu.Unlock()
	require.Empty(t, refused, "answers a client may not retry")
	require.Greater(t, len(acked), 120, "the writer wrote throughout")
	created := providersCreated(t, rs.at(1))
	for _, name := range acked {
		require.Equal(t, 1, created[name], "acknowledged write %s has %d Created events", name, created[name])
	}
	for name, n := range created {
		require.LessOrEqual(t, n, 1, "%s was created %d times", name, n)
	}
	for i := range 3 {
		p := rs.at(i)
		p.eventually(time.Minute, "every acknowledged write on replica "+strconv.Itoa(i), func() bool {
			names := map[string]bool{}
			for _, n := range p.providerNames() {
				names[n] = true
			}
			for _, n := range acked {
				if !names[n] {
					return false
				}
			}
			return true
		})
	}

	// The watcher: every acknowledged write once, in order, across its
	// resumptions; the lame ducks ended their watches with a BOOKMARK.
	last := acked[len(acked)-1]
	rs.at(0).eventually(time.Minute, "the watcher saw the last write", func() bool {
		watcher.mu.Lock()
		defer watcher.mu.Unlock()
		for _, ev := range watcher.events {
			if ev.Name == last {
				return true
			}
		}
		return false
	})
	stopWatching()
	clients.Wait()
	watcher.mu.Lock()
	defer watcher.mu.Unlock()
	require.Empty(t, watcher.errs, "the watches failed")
	added := map[string]int{}
	var prev uint64
	for _, ev := range watcher.events {
		require.Greater(t, ev.RV, prev, "the watcher's events in order, none twice (%s %s)", ev.Type, ev.Name)
		prev = ev.RV
		if ev.Type == "ADDED" {
			added[ev.Name]++
		}
	}
	for _, name := range acked {
		require.Equal(t, 1, added[name], "the watcher saw %s ADDED %d times", name, added[name])
	}
	t.Logf("the watch ended %d times; with a BOOKMARK: %v", len(watcher.ends), watcher.ends)
	require.GreaterOrEqual(t, len(watcher.ends), 6, "the watch moved with every replacement")
	lameDuckEnds := watcher.ends[len(watcher.ends)-3:]
	require.Equal(t, []bool{true, true, true}, lameDuckEnds, "a lame duck ends a watch with a BOOKMARK")

	// The upgrade and the apply finished, once.
	p = rs.at(2)
	p.eventually(5*time.Minute, "the upgrade finished", func() bool {
		us := p.upgrades("phoenix")
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	run := p.upgrades("phoenix")[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	entered := upgradesEntered(t, p, "phoenix", run.Metadata.Name)
	require.Len(t, entered, 2)
	for name, n := range entered {
		require.Equal(t, 1, n, "machine %s was upgraded %d times", name, n)
	}
	p.settled("apollo", 2)
	var succeeded []string
	for _, a := range p.applies("apollo") {
		t.Logf("apollo apply %s: %s", a.Metadata.Name, a.Status.Phase)
		if a.Status.Phase == "Succeeded" {
			succeeded = append(succeeded, a.Metadata.Name)
		}
	}
	require.Len(t, succeeded, 1, "one Succeeded apply built apollo")
	require.Len(t, nodesAt(t, bootAPI{url: emu, token: emuToken}), 4, "no machine was built twice")
}

// startKubeEmulator is startTestEmulator with a real Kubernetes control
// plane on the emulated control planes, as the server's own emulator runs
// them: the upgrade saga drains Nodes and waits for them to be Ready. The
// replicas do not run the emulator (it outlives them), so they do not know
// its nodes would otherwise run no Kubernetes.
func startKubeEmulator(t *testing.T) (url, token string) {
	t.Helper()
	tools, err := tofutest.ToolsDir()
	require.NoError(t, err)
	kube, err := emulator.KubeFromMode("on", tools)
	require.NoError(t, err, "the rolling upgrade test runs a Talos upgrade, which drains Nodes: it needs `go tool task tools`")
	emu, err := emulator.New(emulator.Config{StateDir: filepath.Join(t.TempDir(), "emulator"), Kube: kube})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: emu.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = emu.Run(ctx) }()
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		cancel()
		_ = srv.Close()
		wg.Wait()
	})
	select {
	case <-emu.Ready():
	case <-time.After(startWithin):
		t.Fatal("the emulator did not start")
	}
	return "http://" + ln.Addr().String(), emu.APIToken()
}

// providersCreated counts the Created events of each provider in the
// event history.
func providersCreated(t *testing.T, p *proc) map[string]int {
	t.Helper()
	created := map[string]int{}
	for next := "&since=0"; next != ""; {
		var page struct {
			Metadata struct{ Continue string }
			Items    []struct {
				Action string `json:"action"`
				Object struct {
					Metadata struct{ Name string }
				} `json:"object"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Provider&limit=10000"+next), &page))
		for _, ev := range page.Items {
			if ev.Action == "Created" {
				created[ev.Object.Metadata.Name]++
			}
		}
		next = ""
		if page.Metadata.Continue != "" {
			next = "&continue=" + page.Metadata.Continue
		}
	}
	return created
}
