package webui

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

//go:embed static
var staticFiles embed.FS

// Prefix is where the UI is served.
const Prefix = "/ui"

// Config tunes the UI. The zero value is usable; each field documents its default.
type Config struct {
	// MaxFormBytes bounds form bodies; default 1 MiB. Larger ones get 413.
	MaxFormBytes int64
	// LiveDebounce gathers a burst of changes into one re-render of a live
	// page's fragments; default 150ms.
	LiveDebounce time.Duration
	// LiveRefresh re-renders live fragments this often even without changes
	// (ages, the audit log, which has its own stream); default 10s.
	LiveRefresh time.Duration
	// Heartbeat is the SSE comment keeping idle live streams open; default 15s.
	Heartbeat time.Duration
	// SecureCookies marks the pre-sign-in CSRF cookie Secure (serve over TLS).
	SecureCookies bool
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Version is the server's release, shown in the footer of every
	// signed-in page; default none (the footer names no version).
	Version string
}

func (c *Config) setDefaults() {
	if c.MaxFormBytes == 0 {
		c.MaxFormBytes = 1 << 20
	}
	if c.LiveDebounce == 0 {
		c.LiveDebounce = 150 * time.Millisecond
	}
	if c.LiveRefresh == 0 {
		c.LiveRefresh = 10 * time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Identity authenticates browser requests and guards their forms; the
// identity.Service is one.
type Identity interface {
	Authenticate(r *http.Request) (identity.Identity, error)
	CSRFToken(binding string) string
	CheckCSRF(binding, token string) bool
}

// Streams hands out the slots of open streams (handlers.API): live pages
// count with the API's watches and follows, per user and in all.
type Streams interface {
	AcquireStream(uid, name string) (release func(), err error)
}

// Deps are the parts the UI is built on.
type Deps struct {
	// Streams, when set, bounds live streams with the API's watch limits
	// (--max-watches, --max-watches-per-user); the server always sets it.
	Streams Streams
	// API is the REST API's handler; every read and write goes through it.
	API http.Handler
	// Identity authenticates page requests and checks CSRF tokens.
	Identity Identity
	// Cache reports changes on the event stream, so live fragments are
	// re-rendered, and is waited on, so the re-render shows the change.
	Cache *projections.Cache
	// DecryptState, when set, decrypts a tenant's state as tofu encrypted it
	// (TF_ENCRYPTION), so the state page can compare the resources of two
	// encrypted versions; the blob is read through the API as the user (the
	// API decides who may), and only addresses and attribute names reach
	// the page. Nil leaves encrypted versions compared by serial and size.
	DecryptState func(ctx context.Context, tenant string, blob []byte) ([]byte, error)
}

// UI serves the web interface.
type UI struct {
	cfg      Config
	api      backend
	identity Identity
	cache    *projections.Cache
	streams  Streams
	log      *slog.Logger
	// decryptState is Deps.DecryptState.
	decryptState func(ctx context.Context, tenant string, blob []byte) ([]byte, error)
	echo         *echo.Echo
	static       fs.FS
	etags        map[string]string

	// stopping ends live streams when the server shuts down.
	stopping context.Context
	stop     context.CancelFunc
}

// New builds the UI and its routes.
func New(cfg Config, d Deps) *UI {
	cfg.setDefaults()
	u := &UI{cfg: cfg, api: backend{api: d.API}, identity: d.Identity, cache: d.Cache, streams: d.Streams, log: cfg.Log, decryptState: d.DecryptState}
	u.stopping, u.stop = context.WithCancel(context.Background())
	u.static, _ = fs.Sub(staticFiles, "static")
	u.etags = map[string]string{}
	_ = fs.WalkDir(u.static, ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		raw, err := fs.ReadFile(u.static, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		u.etags[p] = hex.EncodeToString(sum[:8])
		return nil
	})
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = echo.ExtractIPDirect()
	e.HTTPErrorHandler = u.errorHandler
	e.Use(u.recover, securityHeaders, u.limitBody)
	u.echo = e
	u.routes()
	return u
}

// Close ends every open live stream; call it before shutting the HTTP server
// down, since live streams never end on their own.
func (u *UI) Close() { u.stop() }

// Handler serves the UI under /ui, redirects "/" there and hands every other
// request to next (the API).
func (u *UI) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			http.Redirect(w, r, Prefix+"/", http.StatusFound)
		case r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/"):
			u.echo.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ServeHTTP serves the UI's own routes (tests call it directly).
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.echo.ServeHTTP(w, r) }

// pages is the router for authenticated pages: every route takes the session
// and CSRF middleware.
type pages struct {
	e  *echo.Echo
	mw []echo.MiddlewareFunc
}

func (p *pages) GET(route string, h echo.HandlerFunc)    { p.e.GET(Prefix+route, h, p.mw...) }
func (p *pages) POST(route string, h echo.HandlerFunc)   { p.e.POST(Prefix+route, h, p.mw...) }
func (p *pages) PUT(route string, h echo.HandlerFunc)    { p.e.PUT(Prefix+route, h, p.mw...) }
func (p *pages) DELETE(route string, h echo.HandlerFunc) { p.e.DELETE(Prefix+route, h, p.mw...) }

func (u *UI) routes() {
	e := u.echo
	e.GET(Prefix, func(c echo.Context) error { return c.Redirect(http.StatusFound, Prefix+"/") })
	e.GET(Prefix+"/static/*", u.serveStatic)
	e.GET(Prefix+"/login", u.loginPage)
	e.POST(Prefix+"/login", u.login)
	p := &pages{e: e, mw: []echo.MiddlewareFunc{u.authenticate, u.checkCSRF}}
	p.POST("/logout", u.logout)
	u.dashboardRoutes(p)
	u.tenantListRoutes(p)
	u.tenantRoutes(p)
	u.tenantSpecRoutes(p)
	u.nodeGroupOpsRoutes(p)
	u.providerConfigRoutes(p)
	u.metalRoutes(p)
	u.tenantOpsRoutes(p)
	u.stateRoutes(p)
	u.machineRoutes(p)
	u.settingsRoutes(p)
	u.providerRoutes(p)
	u.rolloutRoutes(p)
}

// serveStatic serves the embedded assets with an ETag, so browsers revalidate
// cheaply and always pick up a new build.
func (u *UI) serveStatic(c echo.Context) error {
	name := path.Clean(c.Param("*"))
	tag, ok := u.etags[name]
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, "no such asset")
	}
	h := c.Response().Header()
	h.Set("ETag", `"`+tag+`"`)
	h.Set("Cache-Control", "no-cache")
	if c.Request().Header.Get("If-None-Match") == `"`+tag+`"` {
		return c.NoContent(http.StatusNotModified)
	}
	raw, err := fs.ReadFile(u.static, name)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such asset")
	}
	ct := "application/octet-stream"
	switch path.Ext(name) {
	case ".css":
		ct = "text/css; charset=utf-8"
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".svg":
		ct = "image/svg+xml"
	}
	return c.Blob(http.StatusOK, ct, raw)
}

// asset is the URL of a static file, versioned by its content.
func (u *UI) asset(name string) string {
	return Prefix + "/static/" + name + "?v=" + u.etags[name]
}

// securityHeaders keep the UI to its own origin: no external scripts, styles,
// fonts or frames (htmx needs no eval here: hx-on is not used).
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		return next(c)
	}
}

// limitBody bounds form bodies.
func (u *UI) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if r.ContentLength > u.cfg.MaxFormBytes {
				return echo.NewHTTPError(http.StatusRequestEntityTooLarge, "the form is too large")
			}
			r.Body = http.MaxBytesReader(c.Response(), r.Body, u.cfg.MaxFormBytes)
		}
		return next(c)
	}
}

// render writes a component with a status code.
func render(c echo.Context, code int, comp templ.Component) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(code)
	return comp.Render(c.Request().Context(), c.Response())
}

// isHTMX reports whether the request came from htmx (answer a fragment).
func isHTMX(c echo.Context) bool { return c.Request().Header.Get("HX-Request") == "true" }

// now is the clock.
func (u *UI) now() time.Time { return u.cfg.Now() }
