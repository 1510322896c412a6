package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// createOwnToken makes an API token as the caller and returns its name.
func (s *stack) createOwnToken(session string) string {
	s.t.Helper()
	r := s.do(http.MethodPost, "/api/v1/apitokens", `{"metadata":{},"spec":{"description":"ci"}}`, bearer(session)...)
	require.Equal(s.t, http.StatusCreated, r.Code, string(r.Body))
	return r.object(s.t).Metadata.Name
}

// tokenUser is the owner an APIToken object names, "" for another kind.
func tokenUser(t *testing.T, obj *domain.Object) string {
	t.Helper()
	if obj.Kind != domain.APITokenKind.Kind {
		return ""
	}
	var spec domain.APITokenSpec
	require.NoError(t, json.Unmarshal(obj.Spec, &spec))
	return spec.User
}

// TestEventsShowOnlyVisibleTokens: /api/v1/events, replayed or followed,
// shows a non-admin only the APIToken objects get and list show it (its
// own); an admin sees every one (issue 13, defect 11).
func TestEventsShowOnlyVisibleTokens(t *testing.T) {
	s := newStack(t).withProvider()
	s.createUser("alice", domain.RoleView, "alices password is long")
	s.createUser("bob", domain.RoleView, "bobs password is long")
	alice := s.sessionToken("alice", "alices password is long")
	bob := s.sessionToken("bob", "bobs password is long")
	aliceTok := s.createOwnToken(alice)
	bobTok := s.createOwnToken(bob)
	follow := s.watch("/api/v1/events?follow=true", bearer(alice)...)
	s.createOwnToken(bob)
	s.mustCreate("/api/v1/tenants", tenantBody("after", nil))

	for _, query := range []string{"", "?kind=apitokens", "?newest=100", "?name=" + bobTok} {
		r := s.do(http.MethodGet, "/api/v1/events"+query, nil, bearer(alice)...)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		var page eventPage
		require.NoError(t, json.Unmarshal(r.Body, &page))
		var own int
		for _, it := range page.Items {
			require.NotEqual(t, "bob", tokenUser(t, it.Object), "alice sees bob's token in events%s: %+v", query, it)
			if it.Object.Metadata.Name == aliceTok {
				own++
			}
		}
		if query != "?name="+bobTok {
			require.Positive(t, own, "alice sees her own token in events%s", query)
		}
	}
	// An admin sees both users' tokens.
	owners := map[string]bool{}
	for _, it := range s.eventPage(t, "?kind=apitokens").Items {
		owners[tokenUser(t, it.Object)] = true
	}
	require.Equal(t, map[string]bool{"alice": true, "bob": true}, owners)

	// The follow, opened before bob's second token, never shows it either.
	for {
		ev := follow.next(t)
		require.Equal(t, "EVENT", ev.Event, ev.Data)
		var body struct {
			Object eventItem `json:"object"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &body), ev.Data)
		obj := body.Object.Object
		require.NotEqual(t, "bob", tokenUser(t, obj), "alice follows bob's token: %+v", obj)
		if obj.Kind == domain.TenantKind.Kind && obj.Metadata.Name == "after" {
			break
		}
	}
}
