package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

const testToken = "test-token"

// uiStack is the API and the UI on a real embedded NATS in a temp dir, with
// the audit log, the PKI (configs, talosconfig, kubeconfig) and apply logs.
type uiStack struct {
	t        testing.TB
	env      *eventstoretest.Env
	cache    *projections.Cache
	api      *handlers.API
	identity *identity.Service
	audit    *eventstore.AuditLog
	logs     *tofu.Logs
	ui       *UI
	srv      *httptest.Server
}

// stackOption adjusts the API's dependencies before it is built.
type stackOption func(*handlers.Deps)

func newUIStack(t testing.TB, opts ...stackOption) *uiStack {
	t.Helper()
	env := eventstoretest.Start(t)
	s := &uiStack{t: t, env: env}
	s.cache = projections.NewCache(env.Store, nil)
	projector := projections.NewProjector(env.Store, nil, "test")
	fin := &projections.TenantFinalizer{Cache: s.cache, Store: env.Store, Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := identity.NewService(ctx, identity.Config{StaticToken: testToken, PasswordCost: bcrypt.MinCost}, env.Store, s.cache)
	require.NoError(t, err)
	s.identity = id
	s.audit, err = eventstore.OpenAudit(ctx, env.Store, eventstore.AuditConfig{})
	require.NoError(t, err)
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	pki := talos.NewPKI(talos.PKIConfig{Cache: s.cache, Secrets: sealed, Interval: 20 * time.Millisecond})
	s.logs, err = tofu.OpenLogs(ctx, env.Store)
	require.NoError(t, err)
	deps := handlers.Deps{Store: env.Store, Cache: s.cache, Projector: projector, Finalizer: fin, Identity: id,
		Audit: s.audit, Talos: talos.NewService(s.cache, pki), ApplyLogs: s.logs, ConfigDryRun: inPlace{}}
	for _, o := range opts {
		o(&deps)
	}
	s.api = handlers.New(handlers.Config{}, deps)
	s.ui = New(Config{LiveDebounce: 20 * time.Millisecond}, Deps{API: s.api.Handler(), Identity: id, Cache: s.cache, Streams: s.api})
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{s.cache.Run, projector.Run, fin.Run, pki.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(runCtx); err != nil && runCtx.Err() == nil {
				t.Errorf("worker: %v", err)
			}
		}()
	}
	s.srv = httptest.NewServer(s.ui.Handler(s.api.Handler()))
	t.Cleanup(func() {
		s.ui.Close()
		s.api.StopWatches()
		s.srv.Close()
		stop()
		wg.Wait()
	})
	require.Eventually(t, func() bool { return s.cache.Ready() && id.Ready() }, 10*time.Second, 5*time.Millisecond)
	return s
}

// apiCall calls the REST API with the static admin token and decodes the
// answer into out (unless nil); it fails the test on an error answer.
func (s *uiStack) apiCall(method, path string, body any, out any) {
	s.t.Helper()
	code, raw := s.apiRaw(method, path, body)
	require.Less(s.t, code, 400, "%s %s: %s", method, path, raw)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(raw, out), string(raw))
	}
}

// apiRaw calls the REST API with the static admin token.
func (s *uiStack) apiRaw(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(s.t, err)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.srv.URL+"/api/v1"+path, r)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, raw
}

// createUser makes a user with a password.
func (s *uiStack) createUser(name, role, password string) {
	s.t.Helper()
	s.apiCall(http.MethodPost, "/users", map[string]any{"apiVersion": "rezuscloud.io/v1", "kind": "User",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"role": role, "password": password}}, nil)
}

// create posts an object through the API as the admin token.
func (s *uiStack) create(path string, obj map[string]any) {
	s.t.Helper()
	s.apiCall(http.MethodPost, path, obj, nil)
}

// browser is a signed-in (or not yet) browser: cookies, and the CSRF token
// of the last page it loaded.
type browser struct {
	s      *uiStack
	client *http.Client
	csrf   string
}

// page is one answer.
type page struct {
	Code   int
	Body   string
	Header http.Header
}

func (s *uiStack) newBrowser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{s: s, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// signIn makes a user with role and signs a new browser in as them.
func (s *uiStack) signIn(name, role string) *browser {
	s.t.Helper()
	s.createUser(name, role, "pw-"+name+"-123456")
	b := s.newBrowser()
	login := b.get("/ui/login")
	require.Equal(s.t, http.StatusOK, login.Code, login.Body)
	res := b.form("/ui/login", url.Values{"username": {name}, "password": {"pw-" + name + "-123456"}, "next": {"/ui/"}})
	require.Equal(s.t, http.StatusSeeOther, res.Code, res.Body)
	home := b.get("/ui/")
	require.Equal(s.t, http.StatusOK, home.Code, home.Body)
	return b
}

var csrfPattern = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func (b *browser) do(req *http.Request) page {
	b.s.t.Helper()
	resp, err := b.client.Do(req)
	require.NoError(b.s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.s.t, err)
	p := page{Code: resp.StatusCode, Body: string(raw), Header: resp.Header}
	if m := csrfPattern.FindStringSubmatch(p.Body); m != nil {
		b.csrf = m[1]
	}
	return p
}

// get loads a page as a browser navigation.
func (b *browser) get(path string) page {
	req, err := http.NewRequest(http.MethodGet, b.s.srv.URL+path, nil)
	require.NoError(b.s.t, err)
	return b.do(req)
}

// hxGet loads a fragment as htmx does.
func (b *browser) hxGet(path string) page {
	req, err := http.NewRequest(http.MethodGet, b.s.srv.URL+path, nil)
	require.NoError(b.s.t, err)
	req.Header.Set("HX-Request", "true")
	return b.do(req)
}

// form submits a plain form with the CSRF token of the last page.
func (b *browser) form(path string, v url.Values) page {
	if v.Get(csrfField) == "" {
		v.Set(csrfField, b.csrf)
	}
	req, err := http.NewRequest(http.MethodPost, b.s.srv.URL+path, strings.NewReader(v.Encode()))
	require.NoError(b.s.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// hx sends an htmx request (the CSRF token in its header, as the layout's
// hx-headers does).
func (b *browser) hx(method, path string, v url.Values) page {
	var body io.Reader
	if v != nil {
		body = strings.NewReader(v.Encode())
	}
	req, err := http.NewRequest(method, b.s.srv.URL+path, body)
	require.NoError(b.s.t, err)
	req.Header.Set("HX-Request", "true")
	req.Header.Set(csrfHeader, b.csrf)
	if v != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return b.do(req)
}

// liveEvents reads a live stream until it has seen want (an SSE event whose
// data contains it) or the time is up; it returns every event name=data seen.
func (b *browser) liveEvents(path string, within time.Duration, want func(event, data string) bool) bool {
	b.s.t.Helper()
	return b.liveEventsHook(path, within, func() {}, want)
}

// liveEventsHook is liveEvents calling started once the stream has answered.
func (b *browser) liveEventsHook(path string, within time.Duration, started func(), want func(event, data string) bool) bool {
	b.s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.s.srv.URL+path, nil)
	require.NoError(b.s.t, err)
	resp, err := b.client.Do(req)
	require.NoError(b.s.t, err)
	defer resp.Body.Close()
	require.Equal(b.s.t, http.StatusOK, resp.StatusCode)
	require.Equal(b.s.t, "text/event-stream", resp.Header.Get("Content-Type"))
	started()
	var event string
	var data strings.Builder
	buf := make([]byte, 0, 64*1024)
	rest := ""
	for {
		n, err := resp.Body.Read(buf[:cap(buf)])
		rest += string(buf[:n])
		for {
			i := strings.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			line := rest[:i]
			rest = rest[i+1:]
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data.WriteString(strings.TrimPrefix(line, "data: "))
				data.WriteByte('\n')
			case line == "":
				if event != "" && want(event, data.String()) {
					return true
				}
				event = ""
				data.Reset()
			}
		}
		if err != nil {
			return false
		}
	}
}

// hxGetTarget is hxGet with the HX-Target header htmx sends for a target.
func (b *browser) hxGetTarget(path, target string) page {
	req, err := http.NewRequest(http.MethodGet, b.s.srv.URL+path, nil)
	require.NoError(b.s.t, err)
	req.Header.Set("HX-Request", "true")
	req.Header.Set("HX-Target", target)
	return b.do(req)
}

// hxTarget is hx with the HX-Target header.
func (b *browser) hxTarget(method, path, target string) page {
	req, err := http.NewRequest(method, b.s.srv.URL+path, nil)
	require.NoError(b.s.t, err)
	req.Header.Set("HX-Request", "true")
	req.Header.Set("HX-Target", target)
	req.Header.Set(csrfHeader, b.csrf)
	return b.do(req)
}

// record writes an object the way a controller does (applies are read-only
// through the API): straight through the event store, with a status.
func (s *uiStack) record(kind *domain.KindInfo, tenant, name string, spec, status any) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref := domain.Ref{Kind: kind.Kind, Tenant: tenant, Name: name}
	rawSpec, err := json.Marshal(spec)
	require.NoError(s.t, err)
	res, err := s.env.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: "test", Now: time.Now(), NewUID: "uid-" + name,
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: rawSpec}}, eventstore.UpdateOptions{})
	require.NoError(s.t, err)
	if status != nil {
		rawStatus, err := json.Marshal(status)
		require.NoError(s.t, err)
		res, err = s.env.Store.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: "test", Now: time.Now(),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Status: rawStatus}}, eventstore.UpdateOptions{})
		require.NoError(s.t, err)
	}
	require.NoError(s.t, s.cache.WaitFor(ctx, res.Seq))
}

// liveEventsOpen is liveEvents that calls opened once the stream's answer
// has started (so a change made then is one the stream must report).
func (b *browser) liveEventsOpen(path string, within time.Duration, opened func(), want func(event, data string) bool) bool {
	b.s.t.Helper()
	return b.liveEventsHook(path, within, opened, want)
}
