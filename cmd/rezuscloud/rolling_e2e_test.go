//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"sort"
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
	// Each lame duck has the watcher on it when it stops (the watcher
	// moves on by itself after an end, and may be elsewhere after a watch
	// that never started).
	var lameDucks []*proc
	for i := range 3 {
		watcher.follow(i)
		lameDucks = append(lameDucks, rs.at(i))
		rs.at(i).eventually(time.Minute, "the watcher streams from replica "+strconv.Itoa(i), func() bool {
			return watcher.streaming(lameDucks[i])
		})
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
	require.Empty(t, watcher.errs, "the watches of the current build failed")
	if len(watcher.lastErrs) > 0 {
		t.Logf("watches of 0.1.0 that ended with an ERROR (resumed on the next replica): %v", watcher.lastErrs)
	}
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
	var ends []string
	for _, e := range watcher.ends {
		switch {
		case e.on == nil:
			ends = append(ends, "never started")
		case e.bookmarked:
			ends = append(ends, e.on.url+" with a BOOKMARK")
		default:
			ends = append(ends, e.on.url+" without")
		}
	}
	t.Logf("the server ended the watch %d times: %s", len(watcher.ends), strings.Join(ends, "; "))
	for i, lame := range lameDucks {
		var ends []bool
		for _, e := range watcher.ends {
			if e.on == lame {
				ends = append(ends, e.bookmarked)
			}
		}
		require.Equal(t, []bool{true}, ends, "lame duck %d ends its watch, once, with a BOOKMARK", i)
	}

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
	// One Succeeded apply built apollo. 0.1.0 may run it again for the same
	// changes (its replica stopped before it acknowledged their event, and
	// it has no guard against the event coming again); the current build
	// does not (an apply succeeded lists what it applied).
	lastRelease := map[string]bool{}
	rs.mu.Lock()
	for p := range rs.last {
		lastRelease[strconv.Itoa(p.cmd.Process.Pid)] = true
	}
	rs.mu.Unlock()
	applies := p.applies("apollo")
	sort.Slice(applies, func(i, j int) bool { return applies[i].Metadata.Name < applies[j].Metadata.Name })
	applied := map[string]bool{}
	var built []string
	for _, a := range applies {
		t.Logf("apollo apply %s: %s by %s, sources %v, %+v", a.Metadata.Name, a.Status.Phase, a.Status.Holder, a.Spec.Sources, a.Status.Resources)
		if a.Status.Phase != "Succeeded" {
			continue
		}
		again := len(a.Spec.Sources) > 0
		for _, src := range a.Spec.Sources {
			again = again && applied[src]
			applied[src] = true
		}
		if !again {
			built = append(built, a.Metadata.Name)
			continue
		}
		pid := a.Status.Holder[strings.LastIndex(a.Status.Holder, "-")+1:]
		require.True(t, lastRelease[pid], "apply %s by %s of the current build ran changes applied already: %v", a.Metadata.Name, a.Status.Holder, a.Spec.Sources)
		require.Zero(t, a.Status.Resources.Added+a.Status.Resources.Changed+a.Status.Resources.Destroyed, "apply %s ran again", a.Metadata.Name)
	}
	require.Len(t, built, 1, "one Succeeded apply built apollo")
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
