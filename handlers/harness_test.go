package handlers_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

const testToken = "test-token"

// stack is the whole server on a real embedded NATS in a temp dir.
type stack struct {
	t         testing.TB
	env       *eventstoretest.Env
	cache     *projections.Cache
	projector *projections.Projector
	api       *handlers.API
	srv       *httptest.Server
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	identity  *identity.Service
	clock     *testClock
	// identityMutators adjust the identity service's config (set by newStackWith).
	identityMutators []func(*identity.Config)
}

// testClock is a settable clock for expiry tests.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Now()
	}
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func newStack(t testing.TB, mutate ...func(*handlers.Config)) *stack {
	t.Helper()
	return newStackWith(t, nil, mutate...)
}

// newStackWith is newStack with the identity service's config adjusted.
func newStackWith(t testing.TB, idm func(*identity.Config), mutate ...func(*handlers.Config)) *stack {
	t.Helper()
	env := eventstoretest.Start(t)
	s := &stack{t: t, env: env, clock: &testClock{}}
	if idm != nil {
		s.identityMutators = append(s.identityMutators, idm)
	}
	s.cache = projections.NewCache(env.Store, nil)
	s.projector = projections.NewProjector(env.Store, nil, "test")
	fin := &projections.TenantFinalizer{Cache: s.cache, Store: env.Store, Interval: 20 * time.Millisecond}
	cfg := handlers.Config{}
	for _, m := range mutate {
		m(&cfg)
	}
	idctx, idcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer idcancel()
	idcfg := identity.Config{StaticToken: testToken, Now: s.clock.Now, PasswordCost: bcrypt.MinCost}
	for _, m := range s.identityMutators {
		m(&idcfg)
	}
	id, err := identity.NewService(idctx, idcfg, env.Store, s.cache)
	require.NoError(t, err)
	s.identity = id
	deps := handlers.Deps{Store: env.Store, Cache: s.cache, Projector: s.projector, Finalizer: fin, Identity: id}
	require.NoError(t, deps.Validate())
	s.api = handlers.New(cfg, deps)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, run := range []func(context.Context) error{s.cache.Run, s.projector.Run, fin.Run} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("worker: %v", err)
			}
		}()
	}
	s.srv = httptest.NewServer(s.api.Handler())
	t.Cleanup(s.close)
	require.Eventually(t, func() bool { return s.cache.Ready() }, 10*time.Second, 5*time.Millisecond)
	return s
}

// withProvider creates the Provider "emu" (emulated) that the tests' node
// groups name: the API refuses a node group naming a Provider that does not exist.
func (s *stack) withProvider() *stack {
	s.t.Helper()
	r := s.do("POST", "/api/v1/providers", `{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8089"}}}`)
	require.Equal(s.t, http.StatusCreated, r.Code, string(r.Body))
	return s
}

func (s *stack) close() {
	s.api.StopWatches()
	s.srv.Close()
	s.cancel()
	s.wg.Wait()
}

// lastSeq is the stream's last sequence: how many events exist.
func (s *stack) lastSeq() uint64 {
	_, last, err := s.env.Store.Bounds(context.Background())
	require.NoError(s.t, err)
	return last
}

type response struct {
	Code   int
	Body   []byte
	Header http.Header
}

func (r response) object(t testing.TB) *domain.Object {
	t.Helper()
	o := &domain.Object{}
	require.NoError(t, json.Unmarshal(r.Body, o), string(r.Body))
	return o
}

func (r response) status(t testing.TB) domain.Status {
	t.Helper()
	var st domain.Status
	require.NoError(t, json.Unmarshal(r.Body, &st), string(r.Body))
	return st
}

// do sends a request with the test token; body may be a string, []byte or any JSON value.
func (s *stack) do(method, path string, body any, headers ...string) response {
	s.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(s.t, err)
		rd = bytes.NewReader(raw)
	}
	if method == http.MethodPatch {
		ct = "application/merge-patch+json"
	}
	req, err := http.NewRequest(method, s.srv.URL+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return response{Code: resp.StatusCode, Body: b, Header: resp.Header}
}

func (s *stack) mustCreate(path string, body any) *domain.Object {
	s.t.Helper()
	r := s.do(http.MethodPost, path, body)
	require.Equal(s.t, http.StatusCreated, r.Code, string(r.Body))
	return r.object(s.t)
}

func tenantBody(name string, labels map[string]string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "labels": labels}, "spec": map[string]any{}}
}

func nodeGroupBody(name string, count int) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"role": "worker", "count": count, "provider": "emu"}}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	ID    string
	Event string
	Data  string
}

// watchStream reads SSE events from a watch response into a channel.
type watchStream struct {
	resp   *http.Response
	events chan sseEvent
	// comments counts ":" lines (heartbeats).
	mu       sync.Mutex
	comments int
}

func (s *stack) watch(path string, headers ...string) *watchStream {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	require.Equal(s.t, "text/event-stream", resp.Header.Get("Content-Type"))
	w := &watchStream{resp: resp, events: make(chan sseEvent, 4096)}
	go func() {
		defer close(w.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Event != "" {
					w.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				w.mu.Lock()
				w.comments++
				w.mu.Unlock()
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[6:]
			}
		}
	}()
	s.t.Cleanup(w.close)
	return w
}

func (w *watchStream) close() { w.resp.Body.Close() }

// next returns the next non-bookmark event, failing the test after a timeout.
func (w *watchStream) next(t *testing.T) sseEvent {
	t.Helper()
	for {
		select {
		case ev, ok := <-w.events:
			require.True(t, ok, "watch stream ended")
			if ev.Event == "BOOKMARK" {
				continue
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event within 10s")
		}
	}
}

func (ev sseEvent) object(t *testing.T) *domain.Object {
	t.Helper()
	var body struct {
		Type   string         `json:"type"`
		Object *domain.Object `json:"object"`
	}
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &body), ev.Data)
	require.Equal(t, ev.Event, body.Type)
	return body.Object
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// streamEnds waits for a watch's ERROR event with code, and for the stream
// to end right after it.
func streamEnds(t *testing.T, w *watchStream, code int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.events:
			require.True(t, ok, "the stream ended without an ERROR event")
			if ev.Event != "ERROR" {
				continue
			}
			var body struct {
				Object domain.Status `json:"object"`
			}
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &body), ev.Data)
			require.Equal(t, code, body.Object.Code, ev.Data)
			_, more := <-w.events
			require.False(t, more, "the stream goes on after its ERROR event")
			return
		case <-deadline:
			t.Fatal("the stream did not end")
		}
	}
}
