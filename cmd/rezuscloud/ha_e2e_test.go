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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// startTestEmulator runs the node emulator in the test process, so the
// machines outlive whichever replica is killed, and returns its API's URL
// and bearer token.
func startTestEmulator(t *testing.T) (url, token string) {
	t.Helper()
	emu, err := emulator.New(emulator.Config{StateDir: filepath.Join(t.TempDir(), "emulator")})
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

// addEmulatedProvider stores the emulator's token as credentials (sealed,
// named by credentialsRef) and adds the Provider "emulated" on it.
func addEmulatedProvider(t *testing.T, p *proc, emu, emuToken string) {
	t.Helper()
	code, body := p.do(http.MethodPut, "/api/v1/credentials/emulator", fmt.Sprintf(`{"data":{"EMULATOR_TOKEN":%q}}`, emuToken))
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do(http.MethodPost, "/api/v1/providers",
		fmt.Sprintf(`{"metadata":{"name":"emulated"},"spec":{"type":"emulated","config":{"endpoint":%q},"credentialsRef":{"name":"emulator"}}}`, emu))
	require.Equal(t, http.StatusCreated, code, body)
}

// watchEvent is one event of a watch: its type and the object's name and
// resourceVersion.
type watchEvent struct {
	Type string
	Name string
	RV   uint64
}

// followProviders follows the providers from resourceVersion rv until ctx
// ends, as a client does: when a watch ends (its replica lost the node
// serving its consumer), it opens another from the last resourceVersion it
// got, on the next replica of ps. It returns how many times it resumed.
func followProviders(ctx context.Context, t *testing.T, ps []*proc, rv uint64, out chan<- watchEvent) int {
	for resumed := 0; ; resumed++ {
		err := watchProviders(ctx, t, ps[resumed%len(ps)], &rv, out)
		if ctx.Err() != nil {
			return resumed
		}
		t.Logf("resuming the watch from %d: %v", rv, err)
		select {
		case <-ctx.Done():
			return resumed
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchProviders follows the providers after resourceVersion *rv on p until
// ctx ends or the watch does, sending each event and advancing *rv.
func watchProviders(ctx context.Context, t *testing.T, p *proc, rv *uint64, out chan<- watchEvent) error {
	var resp *http.Response
	// A replica whose read model is behind answers 503 with Retry-After, as
	// clients are told to expect; they retry.
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/providers?watch=true&resourceVersion=%d", p.url, *rv), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err = http.DefaultClient.Do(req); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			break
		}
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines int
	for sc.Scan() {
		lines++
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type   string
			Object struct {
				Metadata struct{ Name, ResourceVersion string }
			}
		}
		if json.Unmarshal([]byte(data), &ev) != nil || (ev.Type != "ADDED" && ev.Type != "MODIFIED" && ev.Type != "DELETED") {
			continue
		}
		seq, _ := strconv.ParseUint(ev.Object.Metadata.ResourceVersion, 10, 64)
		select {
		case out <- watchEvent{Type: ev.Type, Name: ev.Object.Metadata.Name, RV: seq}:
			*rv = seq
		case <-ctx.Done():
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("the watch on %s ended after %d lines: %v", p.url, lines, sc.Err())
}

// providerNames lists the providers a replica serves.
func (p *proc) providerNames() []string {
	var l struct {
		Items []struct{ Metadata struct{ Name string } }
	}
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/providers"), &l))
	var names []string
	for _, it := range l.Items {
		names = append(names, it.Metadata.Name)
	}
	return names
}

// TestThreeReplicasSurviveTheLossOfTheApplyingOne runs three replicas that
// form their own NATS cluster (R3), real tofu and the emulator: writes go
// through all three; the replica running an apply is killed; a survivor
// finishes the apply exactly once; every acknowledged write is on both
// survivors; a watch resumes on a survivor from its last resourceVersion
// without a gap; the killed replica, restarted, rejoins and serves what was
// written while it was down. It logs the failover time (kill → a write
// accepted on a survivor), not asserting it: the machine is shared.
func TestThreeReplicasSurviveTheLossOfTheApplyingOne(t *testing.T) {
	t.Parallel()
	oneHeavyTest(t)
	tofu, mirror := tofutest.Tools(t)
	emu, emuToken := startTestEmulator(t)
	c := newTestCluster(t)
	infra := []string{"--tofu", tofu, "--provider-mirror", mirror, "--apply-debounce", "1500ms", "--resync", "0", "--log-level", "info"}
	var ps [3]*proc
	for i := range ps {
		ps[i] = c.launch(t, i, infra...)
	}
	for i, p := range ps {
		p.waitReady(c.dirs[i])
	}
	addEmulatedProvider(t, ps[0], emu, emuToken)

	// Writes through all three: providers (cheap, no apply), each
	// acknowledged one recorded.
	var ackMu sync.Mutex
	acked := map[string]bool{}
	write := func(p *proc, name string) bool {
		code, _ := p.do(http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"`+name+`"},"spec":{"type":"metal"}}`)
		if code == http.StatusCreated {
			ackMu.Lock()
			acked[name] = true
			ackMu.Unlock()
		}
		return code == http.StatusCreated
	}
	for i, p := range ps {
		for n := range 5 {
			require.True(t, write(p, fmt.Sprintf("before-%d-%d", i, n)))
		}
	}

	// An apply, and the replica running it.
	createCluster(t, ps[1], "phoenix", 4)
	var victim int
	ps[1].eventually(3*time.Minute, "the apply is changing things", func() bool {
		as := ps[1].applies("phoenix")
		if len(as) != 1 || as[0].Status.Phase != "Applying" {
			return false
		}
		holder := as[0].Status.Holder
		for i, p := range ps {
			if strings.HasSuffix(holder, "-"+strconv.Itoa(p.cmd.Process.Pid)) {
				victim = i
				return true
			}
		}
		return false
	})
	var survivors []*proc
	for i, p := range ps {
		if i != victim {
			survivors = append(survivors, p)
		}
	}

	// A watch on a survivor, from the present.
	_, list := survivors[0].do(http.MethodGet, "/api/v1/providers", "")
	listRV, err := strconv.ParseUint(list["metadata"].(map[string]any)["resourceVersion"].(string), 10, 64)
	require.NoError(t, err)
	events := make(chan watchEvent, 1024)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	resumed := make(chan int, 1)
	go func() { resumed <- followProviders(watchCtx, t, survivors, listRV, events) }()

	// Kill the applying replica while writes keep coming to the survivors.
	killed := time.Now()
	require.NoError(t, ps[victim].cmd.Process.Signal(syscall.SIGKILL))
	<-ps[victim].done
	var failover time.Duration
	var firstAfterKill string
	for n := 0; ; n++ {
		if name := fmt.Sprintf("during-%d", n); write(survivors[n%2], name) {
			failover, firstAfterKill = time.Since(killed), name
			break
		}
		require.Less(t, time.Since(killed), 2*time.Minute, "no write accepted by a survivor")
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("failover: a write was accepted by a survivor %s after the SIGKILL", failover.Round(time.Millisecond))
	for n := range 10 {
		name := fmt.Sprintf("after-%d", n)
		survivors[n%2].eventually(time.Minute, "write "+name, func() bool { return write(survivors[n%2], name) })
	}

	// The apply is finished by a survivor, once.
	survivors[0].settled("phoenix", 5)
	var succeeded int
	for _, a := range survivors[0].applies("phoenix") {
		if a.Status.Phase == "Succeeded" {
			succeeded++
		}
	}
	require.Equal(t, 1, succeeded, "one Succeeded apply")
	require.Len(t, nodesAt(t, bootAPI{url: emu, token: emuToken}), 5, "no machine was built twice")
	require.Len(t, survivors[1].machines("phoenix"), 5)
	var versions []struct{ Revision, Serial uint64 }
	raw := survivors[1].raw("/api/v1/tenants/phoenix/state/versions")
	var vl struct {
		Items []struct{ Revision, Serial uint64 }
	}
	require.NoError(t, json.Unmarshal(raw, &vl), "%s", raw)
	versions = vl.Items
	require.NotEmpty(t, versions)
	slices.SortFunc(versions, func(a, b struct{ Revision, Serial uint64 }) int { return int(a.Revision) - int(b.Revision) })
	for i := 1; i < len(versions); i++ {
		require.GreaterOrEqual(t, versions[i].Serial, versions[i-1].Serial, "tofu state serials only grow: %+v", versions)
	}

	// Every acknowledged write is on both survivors.
	ackMu.Lock()
	want := make([]string, 0, len(acked))
	for name := range acked {
		want = append(want, name)
	}
	ackMu.Unlock()
	for _, p := range survivors {
		p.eventually(time.Minute, "every acknowledged write on "+p.url, func() bool {
			names := p.providerNames()
			for _, n := range want {
				if !slices.Contains(names, n) {
					return false
				}
			}
			return true
		})
	}

	// The watch saw writes from before and after the kill; reopened on the
	// other survivor from its last resourceVersion, it goes on without a gap.
	seen := map[string]bool{}
	var last uint64
	drain := func(until func() bool) {
		deadline := time.After(time.Minute)
		for !until() {
			select {
			case ev := <-events:
				require.Greater(t, ev.RV, last, "events in order, none twice")
				last = ev.RV
				seen[ev.Name] = true
			case <-deadline:
				t.Fatalf("the watch did not deliver: seen %d names, last %d", len(seen), last)
			}
		}
	}
	drain(func() bool { return seen[firstAfterKill] })
	stopWatch()
	t.Logf("the watch resumed %d times across the kill", <-resumed)
	// Resumed on the other survivor from the last resourceVersion seen.
	events = make(chan watchEvent, 1024)
	watchCtx, stopWatch = context.WithCancel(context.Background())
	defer stopWatch()
	go func() { _ = followProviders(watchCtx, t, []*proc{survivors[1], survivors[0]}, last, events) }()
	for n := range 5 {
		require.True(t, write(survivors[n%2], fmt.Sprintf("resumed-%d", n)))
	}
	drain(func() bool { return seen["resumed-4"] })
	for name := range acked {
		if strings.HasPrefix(name, "during-") || strings.HasPrefix(name, "after-") || strings.HasPrefix(name, "resumed-") {
			require.True(t, seen[name], "the watches missed %s", name)
		}
	}

	// The killed replica rejoins and serves what was written while it was down.
	back := c.launch(t, victim, infra...)
	back.waitReady(c.dirs[victim])
	back.eventually(time.Minute, "the restarted replica serves the writes made while it was down", func() bool {
		names := back.providerNames()
		return slices.Contains(names, "after-9") && slices.Contains(names, "resumed-4")
	})
	require.Len(t, back.machines("phoenix"), 5)
}
