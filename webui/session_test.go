package webui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSignInAndOut(t *testing.T) {
	s := newUIStack(t)
	s.createUser("alice", "edit", "alice-password-1")
	b := s.newBrowser()

	// Pages need a session: a navigation is sent to the sign-in page, with
	// the page to come back to.
	res := b.get("/ui/tenants?labelSelector=env%3Ddev")
	require.Equal(t, http.StatusSeeOther, res.Code)
	assert.Equal(t, "/ui/login?next="+url.QueryEscape("/ui/tenants?labelSelector=env%3Ddev"), res.Header.Get("Location"))
	// htmx requests are told to navigate there.
	res = b.hxGet("/ui/tenants")
	assert.Equal(t, http.StatusUnauthorized, res.Code)
	assert.Equal(t, "/ui/login?next=%2Fui%2Ftenants", res.Header.Get("HX-Redirect"))

	login := b.get("/ui/login?next=/ui/tenants")
	require.Equal(t, http.StatusOK, login.Code)
	assert.Contains(t, login.Body, `name="_csrf"`)

	// A wrong password is refused on the form, with the API's message.
	res = b.form("/ui/login", url.Values{"username": {"alice"}, "password": {"wrong-password"}, "next": {"/ui/tenants"}})
	assert.Equal(t, http.StatusUnauthorized, res.Code)
	assert.Contains(t, res.Body, `data-testid="login-error"`)
	assert.Contains(t, res.Body, `value="alice"`, "the username is kept")

	res = b.form("/ui/login", url.Values{"username": {"alice"}, "password": {"alice-password-1"}, "next": {"/ui/tenants"}})
	require.Equal(t, http.StatusSeeOther, res.Code, res.Body)
	assert.Equal(t, "/ui/tenants", res.Header.Get("Location"))
	home := b.get("/ui/")
	require.Equal(t, http.StatusOK, home.Code)
	assert.Contains(t, home.Body, `data-testid="user-name">alice<`)
	assert.Contains(t, home.Body, `data-testid="user-role">edit<`)
	// The sign-in page sends a signed-in user on.
	assert.Equal(t, http.StatusSeeOther, b.get("/ui/login").Code)

	// Signing out needs the session's CSRF token.
	res = b.form("/ui/logout", url.Values{csrfField: {"forged"}})
	assert.Equal(t, http.StatusForbidden, res.Code)
	res = b.form("/ui/logout", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.Code)
	assert.Equal(t, "/ui/login", res.Header.Get("Location"))
	assert.Equal(t, http.StatusSeeOther, b.get("/ui/").Code, "the session has ended")
}

func TestSignInNeedsTheFormsToken(t *testing.T) {
	s := newUIStack(t)
	s.createUser("alice", "edit", "alice-password-1")
	for name, v := range map[string]url.Values{
		"no token":     {"username": {"alice"}, "password": {"alice-password-1"}},
		"forged token": {"username": {"alice"}, "password": {"alice-password-1"}, csrfField: {"forged"}},
	} {
		t.Run(name, func(t *testing.T) {
			b := s.newBrowser()
			b.get("/ui/login")
			if v.Get(csrfField) == "" {
				v.Set(csrfField, "")
			}
			req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/ui/login", strings.NewReader(v.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			res := b.do(req)
			assert.Equal(t, http.StatusForbidden, res.Code)
			assert.Contains(t, res.Body, "expired")
			assert.Equal(t, http.StatusSeeOther, b.get("/ui/").Code, "not signed in")
		})
	}
}

func TestChangingRequestsNeedTheSessionsToken(t *testing.T) {
	s := newUIStack(t)
	alice := s.signIn("alice", "edit")
	bob := s.signIn("bob", "edit")

	form := url.Values{"metadata.name": {"demo"}}
	// Another session's token is worthless here.
	alice.csrf = bob.csrf
	res := alice.hx(http.MethodPost, "/ui/tenants", form)
	assert.Equal(t, http.StatusForbidden, res.Code)
	assert.Equal(t, "#flash", res.Header.Get("HX-Retarget"))
	code, _ := s.apiRaw(http.MethodGet, "/tenants/demo", nil)
	assert.Equal(t, http.StatusNotFound, code, "nothing was created")

	alice.get("/ui/tenants")
	res = alice.hx(http.MethodPost, "/ui/tenants", form)
	assert.Equal(t, http.StatusCreated, res.Code, res.Body)
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "/ui/",
		"/ui/tenants?x=1":       "/ui/tenants?x=1",
		"https://evil.example/": "/ui/",
		"//evil.example/ui/":    "/ui/",
		"/ui/\\evil":            "/ui/",
		"/api/v1/tenants":       "/ui/",
		"/ui/login":             "/ui/",
		"/ui/live/dashboard":    "/ui/",
	} {
		assert.Equal(t, want, safeNext(in), in)
	}
}

func TestStaticAssetsAndSecurityHeaders(t *testing.T) {
	s := newUIStack(t)
	b := s.newBrowser()
	for _, name := range []string{"app.css", "htmx.min.js", "sse.js"} {
		res := b.get("/ui/static/" + name)
		require.Equal(t, http.StatusOK, res.Code, name)
		assert.NotEmpty(t, res.Body)
		etag := res.Header.Get("ETag")
		require.NotEmpty(t, etag)
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/ui/static/"+name, nil)
		req.Header.Set("If-None-Match", etag)
		assert.Equal(t, http.StatusNotModified, b.do(req).Code)
	}
	assert.Equal(t, http.StatusNotFound, b.get("/ui/static/../ui.go").Code)
	assert.Equal(t, http.StatusNotFound, b.get("/ui/static/nope.js").Code)

	login := b.get("/ui/login")
	csp := login.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "default-src 'self'")
	assert.Contains(t, csp, "frame-ancestors 'none'")
	// No external requests: every URL the page loads is our own.
	assert.NotContains(t, login.Body, "http://")
	assert.NotContains(t, login.Body, "https://")

	// "/" goes to the UI; the API is still served next to it.
	res := b.get("/")
	assert.Equal(t, http.StatusFound, res.Code)
	assert.Equal(t, "/ui/", res.Header.Get("Location"))
	assert.Equal(t, http.StatusOK, b.get("/healthz").Code)
}

func TestFormBodiesAreBounded(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("alice", "edit")
	big := url.Values{"metadata.name": {strings.Repeat("a", 2<<20)}}
	res := b.hx(http.MethodPost, "/ui/tenants", big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, res.Code)
}
