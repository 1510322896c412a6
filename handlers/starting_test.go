package handlers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestStartingAnswersUntilReady(t *testing.T) {
	s := NewStarting()
	s.SetStatus("waiting for the JetStream cluster to elect a meta leader (1 of 3 peers connected)")
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	require.Equal(t, http.StatusOK, get("/healthz").Code, "the process is alive while it waits")
	for _, path := range []string{"/readyz", "/api/v1/tenants"} {
		rec := get(path)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
		require.Equal(t, "1", rec.Header().Get("Retry-After"))
		var st domain.Status
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
		require.Equal(t, domain.ReasonServiceUnavailable, st.Reason)
		require.Contains(t, st.Message, "meta leader (1 of 3 peers connected)")
	}

	s.Ready(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, path := range []string{"/healthz", "/readyz", "/api/v1/tenants"} {
		require.Equal(t, http.StatusTeapot, get(path).Code, path)
	}
}
