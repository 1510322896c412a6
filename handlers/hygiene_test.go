package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// TestMutatingRequestsNeedAJSONContentType checks that a request with a body
// that changes something names a JSON (or YAML) media type: a browser can send
// a cross-origin form or text/plain POST without a preflight, and before the
// check a POST without Content-Type was read as JSON.
func TestMutatingRequestsNeedAJSONContentType(t *testing.T) {
	s := newStack(t)
	body := func(name string) string { return `{"metadata":{"name":"` + name + `"}}` }
	tests := []struct {
		name string
		ct   string // "" sends none
		code int
	}{
		{"no content type", "", http.StatusUnsupportedMediaType},
		{"text/plain", "text/plain", http.StatusUnsupportedMediaType},
		{"form", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"multipart", "multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"no media type", "; charset=utf-8", http.StatusUnsupportedMediaType},
		{"json", "application/json", http.StatusCreated},
		{"json with charset", "Application/JSON; charset=utf-8", http.StatusCreated},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "t" + string(rune('a'+i))
			r := s.do(http.MethodPost, "/api/v1/tenants", body(name), "Content-Type", tt.ct)
			require.Equal(t, tt.code, r.Code, string(r.Body))
			if tt.code != http.StatusCreated {
				require.Equal(t, domain.ReasonUnsupportedMediaType, r.status(t).Reason)
				require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/"+name, nil).Code)
			}
		})
	}
	// Every method that changes something is checked, not only POST.
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete} {
		r := s.do(m, "/api/v1/tenants/acme", `{"metadata":{"name":"acme"}}`, "Content-Type", "text/plain")
		require.Equal(t, http.StatusUnsupportedMediaType, r.Code, m+": "+string(r.Body))
	}
	// A bodiless change needs no Content-Type.
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/tenants/acme", nil).Code)
}

// TestCookieMutationsNeedSameOrigin checks that a change authenticated by the
// session cookie alone (which a browser adds to cross-site requests too) comes
// from the server's own origin, and that bearer tokens are not affected.
func TestCookieMutationsNeedSameOrigin(t *testing.T) {
	s := newStack(t)
	s.createUser("alice", domain.RoleEdit, alicePassword)
	tok := s.sessionToken("alice", alicePassword)
	cookie := identity.SessionCookie + "=" + tok
	origin := s.srv.URL // http://127.0.0.1:port, the Host the client sends
	tests := []struct {
		name    string
		headers []string
		code    int
	}{
		{"cookie, no origin", []string{"Cookie", cookie}, http.StatusForbidden},
		{"cookie, foreign origin", []string{"Cookie", cookie, "Origin", "https://evil.example"}, http.StatusForbidden},
		{"cookie, null origin", []string{"Cookie", cookie, "Origin", "null"}, http.StatusForbidden},
		{"cookie, same-site sibling", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-site", "Origin", origin}, http.StatusForbidden},
		{"cookie, cross-site", []string{"Cookie", cookie, "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"cookie, same origin", []string{"Cookie", cookie, "Origin", origin}, http.StatusCreated},
		{"cookie, same-origin fetch", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-origin"}, http.StatusCreated},
		{"bearer, foreign origin", []string{"Authorization", "Bearer " + tok, "Origin", "https://evil.example"}, http.StatusCreated},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "t" + string(rune('a'+i))
			headers := tt.headers
			if headers[0] == "Cookie" {
				headers = append([]string{"Authorization", ""}, headers...)
			}
			r := s.do(http.MethodPost, "/api/v1/tenants", tenantBody(name, nil), headers...)
			require.Equal(t, tt.code, r.Code, string(r.Body))
			if tt.code == http.StatusForbidden {
				require.Equal(t, domain.ReasonForbidden, r.status(t).Reason)
				require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/"+name, nil).Code)
			}
		})
	}
	// A bodiless change (logout here) is checked as well; reads are not.
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, "Authorization", "", "Cookie", cookie).Code)
	require.Equal(t, http.StatusForbidden, s.do(http.MethodPost, "/api/v1/auth/logout", nil, "Authorization", "", "Cookie", cookie, "Origin", "https://evil.example").Code)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, "Authorization", "", "Cookie", cookie).Code, "the refused logout ended nothing")
}

// TestInvalidUTF8AndDuplicateKeysAreRefused checks that a body that is not
// UTF-8, or that gives a key twice, is refused with a cause rather than stored
// with U+FFFD or with the last of the duplicates.
func TestInvalidUTF8AndDuplicateKeysAreRefused(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	before := s.lastSeq()
	tests := []struct {
		name, method, path, body, field string
	}{
		{"invalid utf-8 in a create", http.MethodPost, "/api/v1/tenants", "{\"metadata\":{\"name\":\"x\",\"annotations\":{\"a\":\"\xff\xfe\"}}}", ""},
		{"invalid utf-8 in a key", http.MethodPost, "/api/v1/tenants", "{\"metadata\":{\"name\":\"x\",\"labels\":{\"\xc3\":\"b\"}}}", ""},
		{"invalid utf-8 in a put", http.MethodPut, "/api/v1/tenants/acme", "{\"metadata\":{\"name\":\"acme\",\"resourceVersion\":\"1\",\"annotations\":{\"a\":\"\xed\xa0\x80\"}}}", ""},
		{"invalid utf-8 in a patch", http.MethodPatch, "/api/v1/tenants/acme", "{\"metadata\":{\"annotations\":{\"a\":\"\x80\"}}}", ""},
		{"duplicate key in a patch", http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"a":"1","a":"2"}}}`, "metadata.labels[a]"},
		{"duplicate top-level key in a patch", http.MethodPatch, "/api/v1/tenants/acme", `{"spec":{},"spec":{"talosVersion":"v1.12.0"}}`, "spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, tt.path, tt.body)
			require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonBadRequest, st.Reason)
			require.NotNil(t, st.Details, "the Status names the cause")
			require.NotEmpty(t, st.Details.Causes)
			require.Equal(t, tt.field, st.Details.Causes[0].Field)
			if tt.field == "" {
				require.Contains(t, st.Details.Causes[0].Message, "UTF-8")
			} else {
				require.Equal(t, domain.CauseDuplicate, st.Details.Causes[0].Type)
			}
		})
	}
	require.Equal(t, before, s.lastSeq(), "nothing was stored")
}

// TestTheServerMakesItsOwnRequestID checks that the id of a request (the
// X-Request-Id answered, the events' correlationId) is always the server's:
// a client could otherwise forge or collide another request's audit trail. The
// client's own id is answered back, bounded and sanitised, as
// X-Client-Request-Id.
func TestTheServerMakesItsOwnRequestID(t *testing.T) {
	s := newStack(t)
	tests := []struct {
		name, sent, echoed string
	}{
		{"plain", "req-42", "req-42"},
		{"blanks", "req\t-43 x", "req-43x"},
		{"non-ascii", "req-é44", "req-44"},
		{"too long", strings.Repeat("x", 300), strings.Repeat("x", 128)},
		{"none", "", ""},
	}
	seen := map[string]bool{}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "t" + string(rune('a'+i))
			r := s.do(http.MethodPost, "/api/v1/tenants", tenantBody(name, nil),
				"X-Request-Id", tt.sent, "X-Correlation-Id", "forged-correlation")
			require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
			id := r.Header.Get("X-Request-Id")
			require.NotEmpty(t, id)
			require.NotEqual(t, tt.sent, id)
			require.False(t, seen[id], "every request gets a new id")
			seen[id] = true
			require.Equal(t, tt.echoed, r.Header.Get("X-Client-Request-Id"))
			rec, err := s.env.Store.Load(context.Background(), domain.Ref{Kind: "Tenant", Name: name})
			require.NoError(t, err)
			require.Equal(t, id, rec.Event.CorrelationID)
		})
	}
}
