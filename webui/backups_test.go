package webui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The Backups section lists a tenant's etcd backups and restores; an
// editor takes a backup now (an EtcdBackup through the API), downloads a
// Succeeded one and restores it after a confirmation; a viewer sees the
// list without the controls. The API's refusals come back as errors.
func TestBackupsSection(t *testing.T) {
	s := newOpsStack(t)
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "acme"}, "spec": map[string]any{"etcdBackup": map[string]any{}}})
	ed := s.signIn("ed", domain.RoleEdit)
	viewer := s.signIn("vi", domain.RoleView)

	page := ed.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, w := range []string{`id="backups"`, `sse-swap="backups"`, "No backups yet.", `data-testid="take-backup"`, `hx-post="/ui/tenants/acme/backups"`} {
		require.Contains(t, page.Body, w)
	}
	page = viewer.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.NotContains(t, page.Body, `data-testid="take-backup"`, "viewers get no controls")

	r := ed.hx(http.MethodPost, "/ui/tenants/acme/backups", url.Values{})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-backup="manual-`)
	var list struct{ Items []domain.EtcdBackup }
	s.apiCall(http.MethodGet, "/tenants/acme/etcdbackups", nil, &list)
	require.Len(t, list.Items, 1)
	b := list.Items[0]
	require.Equal(t, domain.BackupManual, b.Spec.Trigger)
	require.Contains(t, b.Metadata.Finalizers, domain.BackupObjectFinalizer)

	// A Succeeded backup gets Download and Restore (with a confirmation).
	s.apiCall(http.MethodPut, "/tenants/acme/etcdbackups/"+b.Metadata.Name+"/status", map[string]any{
		"metadata": map[string]any{"name": b.Metadata.Name, "resourceVersion": b.Metadata.ResourceVersion},
		"status":   map[string]any{"phase": "Succeeded", "size": 2048, "etcdRevision": 42, "member": "cp-2"}}, nil)
	page = ed.get("/ui/test/ops/acme")
	for _, w := range []string{`data-testid="restore-backup"`, `hx-confirm="Restore acme`, "2.0 KiB", ">42<", "cp-2"} {
		require.Contains(t, page.Body, w)
	}
	// The snapshot holds every secret of the cluster: only a global admin downloads it.
	require.NotContains(t, page.Body, `data-testid="download-backup"`)
	page = s.signIn("ada", domain.RoleAdmin).get("/ui/test/ops/acme")
	for _, w := range []string{`data-testid="download-backup"`, `href="/ui/tenants/acme/backups/` + b.Metadata.Name + `/snapshot"`} {
		require.Contains(t, page.Body, w)
	}

	// This server has no backup store: the restore is refused, and says so.
	r = ed.hx(http.MethodPost, "/ui/tenants/acme/restore", url.Values{"backup": {b.Metadata.Name}})
	require.Equal(t, http.StatusServiceUnavailable, r.Code, r.Body)
	require.Contains(t, r.Body, "etcd backups are not enabled")
	r = ed.hx(http.MethodPost, "/ui/tenants/acme/restore", url.Values{"backup": {"missing"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
	require.Contains(t, r.Body, "does not exist")
	r = viewer.hx(http.MethodPost, "/ui/tenants/acme/backups", url.Values{})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)
}
