//go:build e2e

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/proctree"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// routeProxy carries NATS route connections to one replica's route
// listener: every way to reach that replica (its --peers entry at the
// others, and its --cluster-advertise address, which NATS gossips and
// dials for pooled routes and reconnects). The test cuts a replica off
// without a network namespace: its own proxy refuses everyone, and the
// others' proxies refuse the connections that replica's process makes.
type routeProxy struct {
	ln net.Listener
	to string

	mu      sync.Mutex
	cut     bool
	blocked int                   // a process whose connections are refused; 0: none
	conns   map[net.Conn]net.Conn // accepted -> dialled
}

func newRouteProxy(t *testing.T, to string) *routeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &routeProxy{ln: ln, to: to, conns: map[net.Conn]net.Conn{}}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.setCut(true) })
	return p
}

func (p *routeProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.cut || (p.blocked != 0 && p.from(in, p.blocked))
		p.mu.Unlock()
		if refuse {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.cut || (p.blocked != 0 && p.from(in, p.blocked)) {
			// Cut while it dialled: the cut closed what it knew of.
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			continue
		}
		p.conns[in] = out
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, in)
			p.mu.Unlock()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}

// setCut cuts (closing every connection) or heals the proxy.
func (p *routeProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for in, out := range p.conns {
			_ = in.Close()
			_ = out.Close()
		}
		clear(p.conns)
	}
}

// block refuses (closing what is open) the connections process pid makes
// through the proxy; 0 lets every process through again.
func (p *routeProxy) block(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = pid
	if pid == 0 {
		return
	}
	for in, out := range p.conns {
		if p.from(in, pid) {
			_ = in.Close()
			_ = out.Close()
			delete(p.conns, in)
		}
	}
}

// from reports whether the accepted connection in was made by process
// pid: its peer socket (127.0.0.1:<in's remote port> to the proxy's port)
// is an open file of pid (/proc/net/tcp gives the socket's inode).
func (p *routeProxy) from(in net.Conn, pid int) bool {
	peer, ok := in.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	self := p.ln.Addr().(*net.TCPAddr).Port
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false
	}
	want := fmt.Sprintf("0100007F:%04X 0100007F:%04X", peer.Port, self)
	inode := ""
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1]+" "+f[2] == want {
			inode = f[9]
			break
		}
	}
	if inode == "" {
		return false
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}

// logTime is when the first line of a replica's log written after since
// containing all of parts was written; zero if none.
func logTime(p *proc, since time.Time, parts ...string) time.Time {
	sc := bufio.NewScanner(strings.NewReader(p.log()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(line, s)
		}
		if !ok {
			continue
		}
		var l struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Time.After(since) {
			return l.Time
		}
	}
	return time.Time{}
}

// markedBy lists the processes a replica started that are still there:
// tofu and its provider plugins carry their server's pid
// (internal/proctree).
func markedBy(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	mark := []byte(proctree.OwnerEnv + "=" + strconv.Itoa(pid) + "\x00")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append(raw, 0), mark) {
			out = append(out, n)
		}
	}
	return out
}

// appliesNow is p.applies, or nil while p answers something else than 200
// (a 503 "the read model is catching up; retry" in cluster mode): for
// polling loops, which try again.
func appliesNow(p *proc, tenant string) []apply {
	code, _ := p.do(http.MethodGet, "/api/v1/tenants/"+tenant+"/applies", "")
	if code != http.StatusOK {
		return nil
	}
	return p.applies(tenant)
}

// replicaTenants are the tenants each replica says it works (its heartbeat).
func replicaTenants(p *proc) map[string]int {
	code, body := p.do(http.MethodGet, "/api/v1/replicas", "")
	if code != http.StatusOK {
		return nil // a 503 while the read model catches up: polled again
	}
	out := map[string]int{}
	items, _ := body["items"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		holder, _ := m["holder"].(string)
		n, _ := m["tenants"].(float64)
		out[holder] = int(n)
	}
	return out
}

// TestTenantsAreSharedOverThreeReplicas runs three replicas (their own NATS
// cluster, every route through a proxy the test can cut), real tofu and
// the emulator, and 12 tenants: their applies run on at least two
// replicas, none more than two thirds. A replica cut off from the other two
// in the middle of an apply stops working (its tofu is gone) before a
// survivor takes the tenant, which is applied once more, once; healed, the
// replica gets its share back. A SIGKILLed replica's tenant is applied by a
// survivor. It logs how long each move took, not asserting it: the
// machine is shared.
func TestTenantsAreSharedOverThreeReplicas(t *testing.T) {
	t.Parallel()
	oneHeavyTest(t)
	tofu, mirror := tofutest.Tools(t)
	emu, emuToken := startTestEmulator(t)
	c := newTestCluster(t)
	// inbound[i] is the only way to reach i's route listener.
	var inbound [3]*routeProxy
	for i := range 3 {
		inbound[i] = newRouteProxy(t, c.routes[i])
	}
	// isolate cuts replica i (process pid) off, or heals it.
	isolate := func(i, pid int, off bool) {
		inbound[i].setCut(off)
		for j := range 3 {
			if j != i {
				if off {
					inbound[j].block(pid)
				} else {
					inbound[j].block(0)
				}
			}
		}
	}
	infra := []string{"--tofu", tofu, "--provider-mirror", mirror, "--apply-debounce", "1s", "--resync", "0", "--log-level", "info"}
	start := func(i int) *proc {
		var peers []string
		for j := range 3 {
			if j != i {
				peers = append(peers, inbound[j].ln.Addr().String())
			}
		}
		advertise := inbound[i].ln.Addr().String()
		flags := append([]string{"--cluster-name", "rz", "--cluster-listen", c.routes[i], "--peers", strings.Join(peers, ","),
			"--cluster-advertise", advertise, "--secrets-key-file", c.key}, infra...)
		p := launchServer(t, c.dirs[i], flags...)
		p.waitAddress()
		return p
	}
	var ps [3]*proc
	for i := range ps {
		ps[i] = start(i)
	}
	for i, p := range ps {
		p.waitReady(c.dirs[i])
	}
	addEmulatedProvider(t, ps[0], emu, emuToken)

	// 12 tenants of one machine each, written through all three.
	var tenants []string
	for n := range 12 {
		name := fmt.Sprintf("t%02d", n)
		tenants = append(tenants, name)
		p := ps[n%3]
		code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"`+name+`"},"spec":{}}`)
		require.Equal(t, http.StatusCreated, code, body)
		code, body = p.do(http.MethodPost, "/api/v1/tenants/"+name+"/nodegroups",
			`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
		require.Equal(t, http.StatusCreated, code, body)
	}
	ranOn := map[string]string{} // tenant -> replica of its last apply
	perReplica := map[string]int{}
	for _, tn := range tenants {
		ps[0].settled(tn, 1)
		as := ps[0].applies(tn)
		require.NotEmpty(t, as)
		last := as[len(as)-1]
		require.NotEmpty(t, last.Status.Replica, "the apply names its replica")
		ranOn[tn] = last.Status.Replica
		perReplica[last.Status.Replica]++
	}
	t.Logf("applies per replica: %v", perReplica)
	require.GreaterOrEqual(t, len(perReplica), 2, "applies ran on at least two replicas: %v", perReplica)
	for r, n := range perReplica {
		require.LessOrEqual(t, n, 8, "%s ran more than two thirds of the tenants: %v", r, perReplica)
	}
	ps[0].eventually(time.Minute, "the heartbeats count every tenant once", func() bool {
		sum := 0
		for _, n := range replicaTenants(ps[0]) {
			sum += n
		}
		return sum == len(tenants)
	})

	// The victim: the replica of the most tenants. One of its tenants gets
	// a worker; once that apply runs, the victim is cut off.
	index := func(holder string) int {
		for i, p := range ps {
			if strings.HasSuffix(holder, "-"+strconv.Itoa(p.cmd.Process.Pid)) {
				return i
			}
		}
		if holder != "" {
			t.Fatalf("no replica is %s", holder)
		}
		return -1 // written at schema level 1, which has no replica field
	}
	// ranBy is the replica that ran apply a, from status.replica or, when
	// the record has none (see below), from the run's line in the logs.
	ranBy := func(a apply, since time.Time) int {
		runner := -1
		// The line follows the Succeeded status the caller saw.
		ps[0].eventually(30*time.Second, "a replica logged the run of "+a.Metadata.Name, func() bool {
			for i, p := range ps {
				if !logTime(p, since, "apply worker: run succeeded", `"apply":"`+a.Metadata.Name+`"`).IsZero() {
					runner = i
				}
			}
			return runner != -1
		})
		if a.Status.Replica != "" {
			require.Equal(t, runner, index(a.Status.Replica), "status.replica names the replica that ran %s", a.Metadata.Name)
		}
		return runner
	}
	victim, most := -1, 0
	for r, n := range perReplica {
		if n > most {
			victim, most = index(r), n
		}
	}
	var moving string
	for _, tn := range tenants {
		if index(ranOn[tn]) == victim {
			moving = tn
			break
		}
	}
	survivor := ps[(victim+1)%3]
	code, body := survivor.do(http.MethodPost, "/api/v1/tenants/"+moving+"/nodegroups",
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	var interrupted string
	ps[victim].eventually(2*time.Minute, "the victim applies "+moving, func() bool {
		for _, a := range appliesNow(ps[victim], moving) {
			if a.Status.Phase == "Applying" && index(a.Status.Replica) == victim {
				interrupted = a.Metadata.Name
				return true
			}
		}
		return false
	})
	victimPid := ps[victim].cmd.Process.Pid
	cut := time.Now()
	isolate(victim, victimPid, true)
	// While cut off: when did the victim's tofu go, and when did a survivor
	// start the tenant's next apply?
	var lastTofu time.Time
	var rerun apply
	survivor.eventually(3*time.Minute, "a survivor applies "+moving+" again", func() bool {
		if len(markedBy(victimPid)) > 0 {
			lastTofu = time.Now()
		}
		for _, a := range appliesNow(survivor, moving) {
			if a.Metadata.Name != interrupted && a.Status.Phase == "Succeeded" && a.Status.StartTime != nil && a.Status.StartTime.After(cut) {
				rerun = a
				return true
			}
		}
		return false
	})
	// Who ran it: status.replica says, except when the survivors wrote at
	// schema level 1 (the cut-off victim is a NATS peer without a live
	// heartbeat, which could be a replica of the last release: a record
	// has no replica field then); the run's log line says in any case.
	runner := ranBy(rerun, cut)
	require.NotEqual(t, victim, runner, "a survivor ran it")
	stale := logTime(ps[victim], cut, "heartbeat not fresh")
	require.False(t, stale.IsZero(), "the victim stopped working its tenants")
	took := logTime(ps[runner], cut, "tenant claims: working tenant", `"tenant":"`+moving+`"`)
	require.False(t, took.IsZero(), "the survivor that ran it took %s", moving)
	require.True(t, stale.Before(took), "the victim stopped (%s) before a survivor took %s (%s)", stale, moving, took)
	require.True(t, lastTofu.Before(*rerun.Status.StartTime), "no tofu of the victim ran when the survivor's started (last seen %s, started %s)",
		lastTofu, rerun.Status.StartTime)
	t.Logf("cut off: the victim stopped %s after the cut; a survivor took %s %s after it, its apply started %s after it",
		stale.Sub(cut).Round(time.Millisecond), moving, took.Sub(cut).Round(time.Millisecond), rerun.Status.StartTime.Sub(cut).Round(time.Millisecond))
	var succeeded int
	for _, a := range survivor.applies(moving) {
		switch {
		case a.Metadata.Name == interrupted:
			require.NotEqual(t, "Succeeded", a.Status.Phase, "the interrupted apply is not counted as done")
		case a.Status.Phase == "Succeeded" && a.Status.StartTime.After(cut):
			succeeded++
		}
	}
	require.Equal(t, 1, succeeded, "the change was applied once more, once")

	// Healed, the victim gets its share back.
	isolate(victim, victimPid, false)
	healed := time.Now()
	victimHolder := ""
	for h := range perReplica {
		if index(h) == victim {
			victimHolder = h
		}
	}
	survivor.eventually(3*time.Minute, "the healed replica works tenants again", func() bool {
		return replicaTenants(survivor)[victimHolder] > 0
	})
	t.Logf("healed: the replica works tenants again %s after", time.Since(healed).Round(time.Millisecond))

	// A survivor is SIGKILLed: its tenant's next change is applied by another.
	killedIdx := (victim + 1) % 3
	var orphan string
	for _, tn := range tenants {
		if tn != moving && index(ranOn[tn]) == killedIdx {
			orphan = tn
			break
		}
	}
	if orphan == "" {
		t.Logf("replica %d ran none of the first applies; no SIGKILL move to see", killedIdx)
		return
	}
	other := ps[(killedIdx+1)%3]
	require.NoError(t, ps[killedIdx].cmd.Process.Signal(syscall.SIGKILL))
	<-ps[killedIdx].done
	killed := time.Now()
	other.eventually(time.Minute, "a write accepted after the kill", func() bool {
		code, _ := other.do(http.MethodPost, "/api/v1/tenants/"+orphan+"/nodegroups",
			`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`)
		return code == http.StatusCreated
	})
	other.settled(orphan, 2)
	as := other.applies(orphan)
	last := as[len(as)-1]
	require.NotEqual(t, killedIdx, ranBy(last, killed), "a survivor ran it")
	t.Logf("SIGKILL: %s's change was applied by a survivor, its apply started %s after the kill",
		orphan, last.Status.StartTime.Sub(killed).Round(time.Millisecond))
}
