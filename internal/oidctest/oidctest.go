// Package oidctest runs a real OpenID provider for tests: zitadel/oidc's
// provider (its example storage and login page, the library's own) on a
// loopback port, with users whose groups a test sets and changes, carried
// in the ID token's and userinfo's "groups" claim. Tests of single sign-on
// import it; nothing else may.
package oidctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// Provider is a running OpenID provider with one confidential client.
type Provider struct {
	// Issuer is the provider's issuer URL (http://127.0.0.1:<port>).
	Issuer string
	// ClientID and ClientSecret are the client RezusCloud signs in with.
	ClientID, ClientSecret string

	mu        sync.RWMutex
	users     map[string]*storage.User // by id
	groups    map[string][]string      // by user id
	redirects []string
	// storage holds the grants (RemoveUser ends a user's).
	storage *storage.Storage
}

// Start runs a provider until the test ends.
func Start(t testing.TB) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Issuer: "http://" + ln.Addr().String(), ClientID: "rezuscloud", ClientSecret: "rezuscloud-test-secret",
		users: map[string]*storage.User{}, groups: map[string][]string{}}
	clients := map[string]*storage.Client{p.ClientID: storage.WebClient(p.ClientID, p.ClientSecret)}
	p.storage = storage.NewStorageWithClients(p, clients)
	st := &groupStorage{Storage: p.storage, p: p}
	srv := &http.Server{Handler: exampleop.SetupServer(p.Issuer, st, nil, false), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return p
}

// AllowRedirect registers a redirect URI of the client (RezusCloud's
// callback, known once its server listens).
func (p *Provider) AllowRedirect(uri string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.redirects = append(p.redirects, uri)
}

// AddUser adds a user who logs in on the provider's login page with
// username and password.
func (p *Provider) AddUser(id, username, password string, groups ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users[id] = &storage.User{ID: id, Username: username, Password: password, FirstName: username, LastName: "Test",
		Email: username + "@example.test", EmailVerified: true, PreferredLanguage: language.English}
	p.groups[id] = slices.Clone(groups)
}

// RemoveUser removes a user from the provider, as an administrator there
// would: the user can no longer sign in, and the grants the user was given
// end with it, so their refresh is refused with invalid_grant, as real
// providers answer (Keycloak, Entra ID, Okta, Google). AddUser with the
// same id brings the account back, without its old grants.
func (p *Provider) RemoveUser(id string) {
	p.mu.Lock()
	delete(p.users, id)
	delete(p.groups, id)
	p.mu.Unlock()
	_ = p.storage.TerminateSession(context.Background(), id, p.ClientID)
}

// SetGroups changes a user's groups: what the next ID token (a login or a
// refresh) says.
func (p *Provider) SetGroups(id string, groups ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.groups[id] = slices.Clone(groups)
}

func (p *Provider) groupsOf(id string) []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.groups[id])
}

// GetUserByID, GetUserByUsername and ExampleClientID make the provider the
// example storage's storage.UserStore.
func (p *Provider) GetUserByID(id string) *storage.User {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.users[id]
}

// GetUserByUsername finds a user by the name typed on the login page.
func (p *Provider) GetUserByUsername(name string) *storage.User {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, u := range p.users {
		if u.Username == name {
			return u
		}
	}
	return nil
}

// ExampleClientID names the example's service user (unused here).
func (p *Provider) ExampleClientID() string { return storage.ServiceUserID }

// groupStorage is the example storage with a groups claim, and redirect
// URIs that a test adds after the provider started.
type groupStorage struct {
	*storage.Storage
	p *Provider
}

// SetUserinfoFromRequest fills the ID token: the example's claims and groups.
func (s *groupStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	info.AppendClaims("groups", s.p.groupsOf(req.GetSubject()))
	return nil
}

// SetUserinfoFromToken fills the userinfo answer: the example's claims and groups.
func (s *groupStorage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	info.AppendClaims("groups", s.p.groupsOf(info.Subject))
	return nil
}

// GetClientByClientID wraps the client so its redirect URIs are the ones
// added with AllowRedirect.
func (s *groupStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("client not found")
	}
	return redirectClient{Client: c, p: s.p}, nil
}

type redirectClient struct {
	op.Client
	p *Provider
}

func (c redirectClient) RedirectURIs() []string {
	c.p.mu.RLock()
	defer c.p.mu.RUnlock()
	return slices.Clone(c.p.redirects)
}

// SignIn is a user at a browser: it opens start (a relying party's login
// URL), follows the redirects to this provider's login page, types user and
// password there and follows the redirects that come back. client brings
// the cookies and decides where to stop (CheckRedirect); the answer is the
// last response.
func (p *Provider) SignIn(client *http.Client, start, user, password string) (*http.Response, error) {
	resp, err := client.Get(start)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if resp.StatusCode != http.StatusOK || id == "" || !strings.Contains(string(page), `name="password"`) {
		return nil, fmt.Errorf("expected the provider's login page, got %s at %s: %.300s", resp.Status, resp.Request.URL, page)
	}
	form := url.Values{"id": {id}, "username": {user}, "password": {password}}
	return client.PostForm(p.Issuer+"/login/username", form)
}
