package handlers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

func TestBackupDownloadIsAnAuditedArchive(t *testing.T) {
	ts := newTalosStack(t)
	s := ts.stack
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	r := s.do(http.MethodGet, "/api/v1/admin/backup", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Equal(t, "application/x-tar", r.Header.Get("Content-Type"))
	m, err := eventstore.VerifyBackup(bytes.NewReader(r.Body))
	require.NoError(t, err)
	require.Contains(t, m.Streams, eventstore.StreamName)

	var recs []eventstore.AuditRecord
	require.Eventually(t, func() bool {
		recs, _, err = ts.audit.Query(context.Background(), eventstore.AuditQuery{Kind: "Backup", Limit: 10})
		return err == nil && len(recs) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, http.StatusOK, recs[0].Code)
	require.Equal(t, http.MethodGet, recs[0].Method)
}

func TestBackupFailureBeforeTheFirstByteIsAStatus(t *testing.T) {
	s := newStack(t)
	api := handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector, Identity: s.identity,
		Backup: handlers.BackupFunc(func(context.Context, io.Writer) error { return errors.New("no streams today") })})
	defer api.StopWatches()
	req, err := http.NewRequest(http.MethodGet, "/api/v1/admin/backup", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	api.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), string(domain.ReasonInternalError))
}
