package identity

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestStaticToken(t *testing.T) {
	admin := Identity{Name: "admin", Role: domain.RoleAdmin, AuthMethod: AuthStaticToken}
	st := NewStaticToken("s3cret", admin)
	tests := []struct {
		name    string
		header  string
		wantErr string
	}{
		{name: "the token", header: "Bearer s3cret"},
		{name: "no header", wantErr: "a bearer token is required"},
		{name: "not bearer", header: "Basic s3cret", wantErr: "a bearer token is required"},
		{name: "empty bearer", header: "Bearer ", wantErr: "a bearer token is required"},
		{name: "another token", header: "Bearer s3cres", wantErr: "the bearer token is not valid"},
		{name: "a prefix of it", header: "Bearer s3c", wantErr: "the bearer token is not valid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			id, err := st.Authenticate(r)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, admin, id)
				return
			}
			require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestCSRF(t *testing.T) {
	s := &Service{key: []byte("0123456789abcdef0123456789abcdef")}
	other := &Service{key: []byte("fedcba9876543210fedcba9876543210")}
	tok := s.CSRFToken("session-a")
	tests := []struct {
		name    string
		svc     *Service
		binding string
		token   string
		want    bool
	}{
		{name: "its own token", svc: s, binding: "session-a", token: tok, want: true},
		{name: "another binding", svc: s, binding: "session-b", token: tok},
		{name: "another key", svc: other, binding: "session-a", token: tok},
		{name: "no binding", svc: s, binding: "", token: s.CSRFToken("")},
		{name: "no token", svc: s, binding: "session-a", token: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.svc.CheckCSRF(tc.binding, tc.token))
		})
	}
}
