//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
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
// BOOKMARK's). It records every event and, for each watch the server
// ended, the replica it streamed from and whether its last frame was a
// BOOKMARK. follow moves it to a given replica (a watch it leaves itself
// is not an end).
type rollingWatch struct {
	rs *replicaSet

	mu     sync.Mutex
	events []watchEvent
	ends   []watchEnd
	errs   []string
	// lastErrs are the failures of watches on replicas of the last release:
	// 0.1.0 ends a watch with an ERROR when its stream's leader is elected
	// anew (fixed since), which its client resumes from as from any end.
	lastErrs []string
	// next is the index of the replica the next watch opens on; on is the
	// replica the open watch streams from (nil before it started), leave
	// ends that watch from the client's side.
	next  int
	on    *proc
	leave context.CancelFunc
}

// watchEnd is a watch the server ended: on which replica, and whether with
// a BOOKMARK (a watch that never started ended on none).
type watchEnd struct {
	on         *proc
	bookmarked bool
}

func (w *rollingWatch) run(ctx context.Context, rv uint64) {
	for ctx.Err() == nil {
		w.mu.Lock()
		p := w.rs.at(w.next)
		w.next = (w.next + 1) % 3
		wctx, leave := context.WithCancel(ctx)
		w.leave = leave
		w.mu.Unlock()
		bookmarked, on, err := w.watch(wctx, p, &rv)
		left := wctx.Err() != nil
		leave()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.on, w.leave = nil, nil
		if !left {
			w.ends = append(w.ends, watchEnd{on: on, bookmarked: bookmarked})
			if err != nil {
				if w.rs.ofLastRelease(p) {
					w.lastErrs = append(w.lastErrs, err.Error())
				} else {
					w.errs = append(w.errs, err.Error())
				}
			}
		}
		w.mu.Unlock()
		if left {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// follow has the watcher stream from replica i: it leaves a watch open on
// another replica; streaming says when it does.
func (w *rollingWatch) follow(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on == w.rs.at(i) {
		return
	}
	w.next = i
	if w.leave != nil {
		w.leave()
	}
}

// streaming reports whether the open watch streams from p.
func (w *rollingWatch) streaming(p *proc) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.on == p
}

// watch follows p from *rv until the watch ends; on is p once the server
// started the watch (its ": watching" line), nil if it never did.
func (w *rollingWatch) watch(ctx context.Context, p *proc, rv *uint64) (bookmarked bool, on *proc, err error) {
	var resp *http.Response
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/providers?watch=true&resourceVersion=%d", p.url, *rv), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err = http.DefaultClient.Do(req); err != nil {
			return false, nil, nil // the replica is gone: next one
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			break
		}
		resp.Body.Close() // catching up: retry, as told
		select {
		case <-ctx.Done():
			return false, nil, nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, nil, fmt.Errorf("watch on %s: %s", p.url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), ": watching ") {
			on = p
			w.mu.Lock()
			w.on = p
			w.mu.Unlock()
			continue
		}
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
			return false, on, fmt.Errorf("a watch frame that is not JSON: %w", err)
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
			return false, on, fmt.Errorf("watch on %s: %s event: %s", p.url, ev.Type, data)
		}
	}
	return bookmarked, on, nil
}
