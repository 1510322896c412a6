package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/backup"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/talos"
)

// editor authenticates every request as an edit-role user, or as the
// global admin "root" when it says X-Test-As-Admin.
type editor struct{}

func (editor) Authenticate(r *http.Request) (identity.Identity, error) {
	if r.Header.Get("X-Test-As-Admin") != "" {
		return identity.Identity{Name: "root", Role: domain.RoleAdmin, AuthMethod: "apitoken"}, nil
	}
	return identity.Identity{Name: "alice", Role: domain.RoleEdit, AuthMethod: "apitoken"}, nil
}

// backupAPI is the REST API over an emulated tenant "acme" with the backup
// controller running.
type backupAPI struct {
	*talostest.Cluster
	srv *httptest.Server
}

func newBackupAPI(t *testing.T) *backupAPI {
	t.Helper()
	c := talostest.Start(t, 3, 0)
	objects, err := eventstore.OpenEtcdBackups(c.Ctx, c.Store, c.Sealed)
	require.NoError(t, err)
	api := handlers.New(handlers.Config{}, handlers.Deps{Store: c.Store, Cache: c.Cache, Auth: editor{}, EtcdBackups: objects})
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctrl := backup.New(backup.Config{Store: c.Store, Cache: c.Cache, Backups: objects, PKI: c.PKI, Holder: "test",
		Nodes: talos.NodeAPI{Timeout: 5 * time.Second}, Log: quiet, BackoffBase: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(c.Ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	a := &backupAPI{Cluster: c, srv: srv}
	// No schedule: the test takes its backups by hand.
	r := a.call(http.MethodPatch, "/api/v1/tenants/acme", `{"spec":{"etcdBackup":{}}}`, "application/merge-patch+json")
	require.Equal(t, http.StatusOK, r.StatusCode, r.body)
	return a
}

type answer struct {
	StatusCode int
	header     http.Header
	body       string
}

func (a *backupAPI) call(method, path, body string, ct ...string) answer {
	a.T.Helper()
	return a.callWith(method, path, body, nil, ct...)
}

// callAsAdmin is call as a global admin, without a body.
func (a *backupAPI) callAsAdmin(method, path string) answer {
	a.T.Helper()
	return a.callWith(method, path, "", http.Header{"X-Test-As-Admin": {"1"}})
}

func (a *backupAPI) callWith(method, path, body string, h http.Header, ct ...string) answer {
	a.T.Helper()
	req, err := http.NewRequestWithContext(a.Ctx, method, a.srv.URL+path, strings.NewReader(body))
	require.NoError(a.T, err)
	for k, v := range h {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		if len(ct) > 0 {
			req.Header.Set("Content-Type", ct[0])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(a.T, err)
	return answer{StatusCode: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (a *backupAPI) waitPhase(path string, phases ...string) map[string]any {
	a.T.Helper()
	var obj map[string]any
	require.Eventually(a.T, func() bool {
		r := a.call(http.MethodGet, path, "")
		if r.StatusCode != http.StatusOK || json.Unmarshal([]byte(r.body), &obj) != nil {
			return false
		}
		st, _ := obj["status"].(map[string]any)
		for _, p := range phases {
			if st["phase"] == p {
				return true
			}
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "%s reaches %v", path, phases)
	return obj
}

// TestBackupAndRestoreThroughTheAPI: POST an EtcdBackup, download its
// snapshot (the plain snapshot, Content-Length its size, its sha256 the
// one recorded), wipe etcd, POST /restore, and the keys and revision are
// back; a restore of a tampered object answers 422 on spec field "backup"
// and changes nothing; bad requests answer Status objects with the field.
func TestBackupAndRestoreThroughTheAPI(t *testing.T) {
	a := newBackupAPI(t)
	cluster := a.Em.List()[0].ClusterID
	_, err := a.Em.PutEtcdKey(cluster, "registry/secrets/db", "hunter2")
	require.NoError(t, err)
	want, err := a.Em.PutEtcdKey(cluster, "registry/config", "v1")
	require.NoError(t, err)

	r := a.call(http.MethodPost, "/api/v1/tenants/acme/etcdbackups", `{"metadata":{"name":"b1"}}`)
	require.Equal(t, http.StatusCreated, r.StatusCode, r.body)
	require.Contains(t, r.body, domain.BackupObjectFinalizer)
	obj := a.waitPhase("/api/v1/tenants/acme/etcdbackups/b1", domain.BackupSucceeded, domain.BackupFailed)
	st := obj["status"].(map[string]any)
	require.Equal(t, domain.BackupSucceeded, st["phase"], st["reason"])
	require.EqualValues(t, want.Revision, st["etcdRevision"])

	// An editor makes and restores backups but does not carry the cluster's
	// secrets away (finding 1 of the 2026-12-06 review); a global admin does.
	dl := a.call(http.MethodGet, "/api/v1/tenants/acme/etcdbackups/b1/snapshot", "")
	require.Equal(t, http.StatusForbidden, dl.StatusCode, dl.body)
	require.NotContains(t, dl.body, "hunter2")
	dl = a.callAsAdmin(http.MethodGet, "/api/v1/tenants/acme/etcdbackups/b1/snapshot")
	require.Equal(t, http.StatusOK, dl.StatusCode, dl.body)
	require.EqualValues(t, st["size"], len(dl.body))
	require.Equal(t, dl.header.Get("Content-Length"), strings.TrimSpace(jsonNumber(st["size"])))
	sum := sha256.Sum256([]byte(dl.body))
	require.Equal(t, st["sha256"], hex.EncodeToString(sum[:]))
	require.Contains(t, dl.body, "hunter2", "the download is the plain snapshot")

	// Bad requests: Status objects naming the field.
	for _, tc := range []struct{ body, field string }{
		{`{}`, "backup"},
		{`{"backup":"Not_A_Name"}`, "backup"},
		{`{"backup":"missing"}`, "spec.backup"},
		{`{"backup":"b1","extra":1}`, "extra"},
	} {
		r := a.call(http.MethodPost, "/api/v1/tenants/acme/restore", tc.body)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusUnprocessableEntity}, r.StatusCode, "%s: %s", tc.body, r.body)
		require.Contains(t, r.body, `"kind":"Status"`)
		require.Contains(t, r.body, `"field":"`+tc.field+`"`, tc.body)
	}
	r = a.call(http.MethodPost, "/api/v1/tenants/acme/etcdbackups", `{"metadata":{"name":"b2"},"spec":{"trigger":"schedule","slot":"2026-01-01T00:00:00Z"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, r.body)
	require.Contains(t, r.body, `"field":"spec.trigger"`)

	_, err = a.Em.PutEtcdKey(cluster, "registry/after", "x")
	require.NoError(t, err)
	require.NoError(t, a.Em.WipeEtcd(cluster))

	r = a.call(http.MethodPost, "/api/v1/tenants/acme/restore", `{"backup":"b1"}`)
	require.Equal(t, http.StatusCreated, r.StatusCode, r.body)
	var created domain.Restore
	require.NoError(t, json.Unmarshal([]byte(r.body), &created))
	rs := a.waitPhase("/api/v1/tenants/acme/restores/"+created.Metadata.Name, domain.RestoreSucceeded, domain.RestoreFailed)
	require.Equal(t, domain.RestoreSucceeded, rs["status"].(map[string]any)["phase"], rs["status"])
	got, err := a.Em.EtcdData(cluster)
	require.NoError(t, err)
	require.Equal(t, want.Revision, got.Revision)
	require.Equal(t, map[string]string{"registry/secrets/db": "hunter2", "registry/config": "v1"}, got.Keys)

	// A tampered object: the restore is refused before anything is stored.
	b1 := talostest.GetAs[domain.EtcdBackup](t, a.Cache, domain.ObjectRef(domain.EtcdBackupKind, "acme", "b1"))
	raw, err := a.Store.JetStream().ObjectStore(a.Ctx, eventstore.EtcdBackupBucket)
	require.NoError(t, err)
	name := eventstore.EtcdBackupObject("acme", "b1", b1.Metadata.UID)
	sealed, err := raw.GetBytes(a.Ctx, name)
	require.NoError(t, err)
	sealed[100] ^= 0x80
	_, err = raw.PutBytes(a.Ctx, name, sealed)
	require.NoError(t, err)
	require.NoError(t, a.Em.WipeEtcd(cluster))
	r = a.call(http.MethodPost, "/api/v1/tenants/acme/restore", `{"backup":"b1"}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, r.body)
	require.Contains(t, r.body, `"field":"spec.backup"`)
	require.Contains(t, r.body, "fails authentication")
	d, err := a.Em.EtcdData(cluster)
	require.NoError(t, err)
	require.False(t, d.Bootstrapped, "nothing changed on the nodes")
	dl = a.callAsAdmin(http.MethodGet, "/api/v1/tenants/acme/etcdbackups/b1/snapshot")
	require.Equal(t, http.StatusConflict, dl.StatusCode, "a damaged object never downloads: %s", dl.body)
	require.Contains(t, dl.body, "damaged")
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
