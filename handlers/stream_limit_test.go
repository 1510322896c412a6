package handlers_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// openStream opens a watch or follow with a bearer token and answers the
// status code (and, for a refusal, the answer); a stream that started stays
// open until the test ends, or until the returned close is called.
func (s *stack) openStream(tok, path string) (code int, refused response, close func()) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(s.t, err)
		return resp.StatusCode, response{Code: resp.StatusCode, Body: b, Header: resp.Header}, func() {}
	}
	require.Equal(s.t, "text/event-stream", resp.Header.Get("Content-Type"))
	s.t.Cleanup(func() { resp.Body.Close() })
	return resp.StatusCode, response{}, func() { resp.Body.Close() }
}

// Issue 13, defect 4: with the default limits, one viewer cannot open watches
// until the event stream runs out of consumers. Its tokens and sessions
// share one count; the 33rd stream is refused with 429 before it starts,
// and every other user still watches.
func TestOneViewerCannotHoldEveryWatch(t *testing.T) {
	s := newStack(t)
	s.createUser("vera", domain.RoleView, alicePassword)
	session := s.sessionToken("vera", alicePassword)
	tok, _ := s.createToken(`{}`, bearer(session)...)
	paths := []string{"/api/v1/tenants?watch=true", "/api/v1/events?follow=true"}
	for i := range 32 {
		cred := session
		if i%2 == 1 {
			cred = tok
		}
		code, _, _ := s.openStream(cred, paths[i%2])
		require.Equal(t, http.StatusOK, code, "stream %d", i+1)
	}
	for _, cred := range []string{session, tok} {
		for _, p := range paths {
			code, r, _ := s.openStream(cred, p)
			require.Equal(t, http.StatusTooManyRequests, code, p)
			require.NotEmpty(t, r.Header.Get("Retry-After"))
		}
	}
	s.watch("/api/v1/tenants?watch=true") // another identity
}

// Issue 13, defect 4: the per-user and the global limit on open streams,
// for watches, the events follow and the audit follow alike.
func TestStreamLimits(t *testing.T) {
	s, _ := newAuditedStack(t, nil, func(c *handlers.Config) {
		c.MaxWatchesPerUser = 2
		c.MaxWatches = 5
	})
	tokens := map[string]string{}
	for _, u := range []string{"ann", "bob", "cid"} {
		s.createUser(u, domain.RoleAdmin, alicePassword)
		tokens[u] = s.sessionToken(u, alicePassword)
	}
	ann := tokens["ann"]
	first, _, closeFirst := s.openStream(ann, "/api/v1/tenants?watch=true")
	require.Equal(t, http.StatusOK, first)
	second, _, _ := s.openStream(ann, "/api/v1/audit?follow=true")
	require.Equal(t, http.StatusOK, second)

	t.Run("a user at its limit gets 429 with Retry-After", func(t *testing.T) {
		for _, p := range []string{"/api/v1/tenants/acme/nodegroups?watch=true", "/api/v1/events?follow=true", "/api/v1/audit?follow=true"} {
			code, r, _ := s.openStream(ann, p)
			require.Equal(t, http.StatusTooManyRequests, code, p)
			require.Equal(t, "5", r.Header.Get("Retry-After"), p)
			st := r.status(t)
			require.Equal(t, domain.ReasonTooManyRequests, st.Reason)
			require.Contains(t, st.Message, "for this user")
		}
	})
	t.Run("another user still watches", func(t *testing.T) {
		for _, p := range []string{"/api/v1/events?follow=true", "/api/v1/audit?follow=true"} {
			code, _, _ := s.openStream(tokens["bob"], p)
			require.Equal(t, http.StatusOK, code, p)
		}
	})
	t.Run("closing a stream frees its slot", func(t *testing.T) {
		closeFirst()
		require.Eventually(t, func() bool {
			code, _, _ := s.openStream(ann, "/api/v1/events?follow=true")
			return code == http.StatusOK
		}, 10*time.Second, 20*time.Millisecond)
	})
	t.Run("the global limit", func(t *testing.T) {
		// ann 2, bob 2: one left for everyone.
		code, _, _ := s.openStream(tokens["cid"], "/api/v1/tenants?watch=true")
		require.Equal(t, http.StatusOK, code)
		code, r, _ := s.openStream(tokens["cid"], "/api/v1/events?follow=true")
		require.Equal(t, http.StatusTooManyRequests, code)
		require.Equal(t, "5", r.Header.Get("Retry-After"))
		require.NotContains(t, r.status(t).Message, "for this user")
	})
}
