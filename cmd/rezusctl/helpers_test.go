package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tcNow is an hour before the test CLI's clock: objects made then are 60m old.
var tcNow = time.Date(2026, 5, 1, 11, 0, 0, 0, time.UTC)

// syncBuffer is a bytes.Buffer safe for a command writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testCLI runs the CLI in-process with its own config file and environment.
type testCLI struct {
	t      *testing.T
	env    map[string]string
	stdin  string
	now    time.Time
	config string
	// giveUp is the CLI's WatchGiveUp; default 2 s.
	giveUp time.Duration
	// openBrowser is the CLI's OpenBrowser (login --sso); default none.
	openBrowser func(string) error
}

func newTestCLI(t *testing.T) *testCLI {
	dir := t.TempDir()
	return &testCLI{t: t, config: filepath.Join(dir, "rezus", "config"),
		env: map[string]string{"HOME": dir}, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
}

// with returns the CLI for a subtest: the same config and environment,
// failures reported on t.
func (tc *testCLI) with(t *testing.T) *testCLI {
	c := *tc
	c.t = t
	return &c
}

// result is what one run printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

func (tc *testCLI) cliEnv(stdout, stderr io.Writer) cliEnv {
	env := map[string]string{}
	if tc.config != "" {
		env["REZUSCONFIG"] = tc.config
	}
	for k, v := range tc.env {
		env[k] = v
	}
	now := tc.now
	giveUp := tc.giveUp
	if giveUp == 0 {
		giveUp = 2 * time.Second
	}
	return cliEnv{
		Stdin: strings.NewReader(tc.stdin), Stdout: stdout, Stderr: stderr,
		Getenv:     func(k string) string { return env[k] },
		Now:        func() time.Time { return now },
		WatchRetry: 5 * time.Millisecond, WatchGiveUp: giveUp,
		OpenBrowser: tc.openBrowser,
	}
}

// run runs one command line to its end.
func (tc *testCLI) run(args ...string) result {
	tc.t.Helper()
	var out, errb syncBuffer
	code := newRezusctl(tc.cliEnv(&out, &errb)).run(context.Background(), append([]string{"rezusctl"}, args...))
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// ok runs a command line that must succeed and returns its stdout.
func (tc *testCLI) ok(args ...string) string {
	tc.t.Helper()
	r := tc.run(args...)
	require.Equal(tc.t, 0, r.code, "rezusctl %v failed:\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	return r.stdout
}

// start runs a command line in the background (a watch); stop cancels it and
// returns its exit code.
func (tc *testCLI) start(args ...string) (stdout, stderr *syncBuffer, stop func() int) {
	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	cli := newRezusctl(tc.cliEnv(&out, &errb))
	go func() { done <- cli.run(ctx, append([]string{"rezusctl"}, args...)) }()
	return &out, &errb, func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			tc.t.Fatalf("rezusctl %v did not stop", args)
			return -1
		}
	}
}

// fakeAPI is an in-memory stand-in for the REST API, for unit tests of the
// client side: it keeps objects by item path, answers the verbs with the
// server's status codes, and records every call.
//
// The server's handler goroutines and the test goroutine both touch its
// state, and the race detector sees no ordering through the socket between a
// request served and the test's next line. So every field is read and written
// only under mu, through the methods below; tests never touch the maps.
type fakeAPI struct {
	mu      sync.Mutex
	calls   []string
	bodies  map[string][]byte   // last body per "METHOD path"
	queries map[string][]string // raw query of every request per "METHOD path"
	objects map[string]*domain.Object
	seq     int
	// conflicts makes the next n PUTs of a path answer 409 (a concurrent writer).
	conflicts map[string]int
	// routes overrides the fake for "METHOD path".
	routes map[string]http.HandlerFunc
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{bodies: map[string][]byte{}, queries: map[string][]string{}, objects: map[string]*domain.Object{},
		conflicts: map[string]int{}, routes: map[string]http.HandlerFunc{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// handle serves "METHOD path" with h instead of the fake's store; a nil h
// gives the route back to the store.
func (f *fakeAPI) handle(key string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h == nil {
		delete(f.routes, key)
		return
	}
	f.routes[key] = h
}

func (f *fakeAPI) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// resetCalls forgets the calls recorded so far.
func (f *fakeAPI) resetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

func (f *fakeAPI) body(key string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[key]
}

// queriesOf returns the raw query of every request to "METHOD path", in order.
func (f *fakeAPI) queriesOf(key string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries[key]...)
}

// conflictNext makes the next n PUTs of path answer 409.
func (f *fakeAPI) conflictNext(path string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conflicts[path] = n
}

func (f *fakeAPI) put(path string, o *domain.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	o.Metadata.ResourceVersion = strconv.Itoa(f.seq)
	f.objects[path] = o
}

func writeStatus(w http.ResponseWriter, err *domain.Error) {
	st := domain.StatusOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st.Code)
	_ = json.NewEncoder(w).Encode(st)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.calls = append(f.calls, key)
	f.bodies[key] = body
	f.queries[key] = append(f.queries[key], r.URL.RawQuery)
	route := f.routes[key]
	f.mu.Unlock()
	if route != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		route(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer tok" {
		writeStatus(w, domain.NewUnauthorized("the bearer token is not valid"))
		return
	}
	reply := func(code int, o *domain.Object) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(o)
	}
	name := filepath.Base(r.URL.Path)
	switch r.Method {
	case http.MethodGet:
		if o, ok := f.objects[r.URL.Path]; ok {
			reply(http.StatusOK, o)
			return
		}
		var items []json.RawMessage
		var keys []string
		for p := range f.objects {
			if filepath.Dir(p) == r.URL.Path {
				keys = append(keys, p)
			}
		}
		sort.Strings(keys)
		for _, p := range keys {
			b, _ := json.Marshal(f.objects[p])
			items = append(items, b)
		}
		if k, err := resolveKind(name); err == nil && k.Plural == name {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "List", "metadata": map[string]string{"resourceVersion": strconv.Itoa(f.seq)}, "items": items})
			return
		}
		writeStatus(w, domain.NewNotFound("Object", name))
	case http.MethodPost:
		o := &domain.Object{}
		_ = json.Unmarshal(body, o)
		p := r.URL.Path + "/" + o.Metadata.Name
		if _, ok := f.objects[p]; ok {
			writeStatus(w, domain.NewAlreadyExists(o.Kind, o.Metadata.Name))
			return
		}
		f.seq++
		o.Metadata.ResourceVersion = strconv.Itoa(f.seq)
		f.objects[p] = o
		reply(http.StatusCreated, o)
	case http.MethodPut:
		o := &domain.Object{}
		_ = json.Unmarshal(body, o)
		cur, ok := f.objects[r.URL.Path]
		switch {
		case !ok:
			writeStatus(w, domain.NewNotFound(o.Kind, name))
		case f.conflicts[r.URL.Path] > 0:
			f.conflicts[r.URL.Path]--
			f.seq++
			cur.Metadata.ResourceVersion = strconv.Itoa(f.seq)
			writeStatus(w, domain.NewConflict(o.Kind, name, "the object has been modified"))
		case o.Metadata.ResourceVersion != cur.Metadata.ResourceVersion:
			writeStatus(w, domain.NewConflict(o.Kind, name, "the object has been modified"))
		case string(o.Spec) == string(cur.Spec) && formatLabels(o.Metadata.Labels) == formatLabels(cur.Metadata.Labels):
			reply(http.StatusOK, cur)
		default:
			f.seq++
			o.Metadata.ResourceVersion = strconv.Itoa(f.seq)
			f.objects[r.URL.Path] = o
			reply(http.StatusOK, o)
		}
	case http.MethodDelete:
		o, ok := f.objects[r.URL.Path]
		if !ok {
			writeStatus(w, domain.NewNotFound("Object", name))
			return
		}
		delete(f.objects, r.URL.Path)
		reply(http.StatusOK, o)
	default:
		writeStatus(w, &domain.Error{Reason: domain.ReasonMethodNotAllowed, Message: "method not allowed"})
	}
}

// loginTo points the test CLI's config at a server with the fake's token.
func (tc *testCLI) loginTo(url string) {
	tc.t.Helper()
	tc.ok("config", "set-context", "test", "--server", url, "--token", "tok", "--tenant", "acme")
}

// obj builds an object for fakes and printers.
func obj(kindName, tenant, name string, created time.Time, spec, status string, labels map[string]string) *domain.Object {
	o := &domain.Object{APIVersion: domain.APIVersion, Kind: kindName,
		Metadata: domain.ObjectMeta{Name: name, Tenant: tenant, Labels: labels, UID: "uid-" + name, Generation: 1}}
	if !created.IsZero() {
		o.Metadata.CreationTimestamp = &created
	}
	if spec != "" {
		o.Spec = json.RawMessage(spec)
	}
	if status != "" {
		o.Status = json.RawMessage(status)
	}
	return o
}

func objectBytes(o *domain.Object) []byte {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return b
}
