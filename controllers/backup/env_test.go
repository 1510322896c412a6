package backup_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/backup"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// env is a tenant "acme" of emulated control planes (talostest), the
// backup bucket on its store, and the emulator's HTTP API for its etcd.
type env struct {
	*talostest.Cluster
	backups *eventstore.EtcdBackups
	api     *httptest.Server
	cluster string
}

func newEnv(t testing.TB, cps int, schedule string) *env {
	t.Helper()
	c := talostest.Start(t, cps, 0)
	b, err := eventstore.OpenEtcdBackups(c.Ctx, c.Store, c.Sealed)
	require.NoError(t, err)
	api := httptest.NewServer(c.Em.Handler())
	t.Cleanup(api.Close)
	e := &env{Cluster: c, backups: b, api: api, cluster: c.Em.List()[0].ClusterID}
	e.setSchedule(schedule)
	return e
}

// setSchedule writes the tenant's spec.etcdBackup.
func (e *env) setSchedule(schedule string) {
	e.T.Helper()
	cur := talostest.GetAs[domain.Tenant](e.T, e.Cache, domain.TenantRef(e.Tenant))
	var spec map[string]any
	raw, _ := json.Marshal(cur.Spec)
	require.NoError(e.T, json.Unmarshal(raw, &spec))
	var s any
	require.NoError(e.T, json.Unmarshal([]byte(schedule), &s))
	spec["etcdBackup"] = s
	raw, _ = json.Marshal(spec)
	e.Execute(domain.Command{Op: domain.OpUpdate, Ref: domain.TenantRef(e.Tenant),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: e.Tenant}, Spec: raw}})
}

// start runs a backup controller until the test ends (or stop).
func (e *env) start(holder string, clock controller.Clock) (c *backup.Controller, stop func()) {
	e.T.Helper()
	return e.startWith(holder, clock, talos.NodeAPI{Timeout: 5 * time.Second})
}

// startWith runs a backup controller reaching the nodes through nodes.
func (e *env) startWith(holder string, clock controller.Clock, nodes backup.Nodes) (c *backup.Controller, stop func()) {
	e.T.Helper()
	cfg := backup.Config{Store: e.Store, Cache: e.Cache, Backups: e.backups, PKI: e.PKI, Holder: holder,
		Nodes: nodes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second, PollInterval: 10 * time.Millisecond, Clock: clock,
		PartialQuiet: -1}
	require.NoError(e.T, cfg.Validate())
	c = backup.New(cfg)
	stop = controllertest.Start(e.T, e.Ctx, c.Run)
	return c, stop
}

func (e *env) ref(kind *domain.KindInfo, name string) domain.Ref {
	return domain.ObjectRef(kind, e.Tenant, name)
}

// createBackup creates a manual backup as the API does (with the finalizer).
func (e *env) createBackup(name string) {
	e.T.Helper()
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.EtcdBackupKind, name), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: name, Tenant: e.Tenant, Finalizers: []string{domain.BackupObjectFinalizer}}}})
}

func (e *env) createRestore(name, backupName string) {
	e.T.Helper()
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.RestoreKind, name), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: name, Tenant: e.Tenant}, Spec: json.RawMessage(`{"backup":"` + backupName + `"}`)}})
}

// backupDone waits until the backup is Succeeded or Failed.
func (e *env) backupDone(name string) domain.EtcdBackup {
	e.T.Helper()
	var b *domain.EtcdBackup
	require.Eventually(e.T, func() bool {
		got, ok, err := projections.Get[domain.EtcdBackup](e.Cache, e.ref(domain.EtcdBackupKind, name))
		b = got
		return err == nil && ok && got.Status.Final()
	}, 60*time.Second, 10*time.Millisecond, "backup %s done", name)
	return *b
}

func (e *env) restoreDone(name string) domain.Restore {
	e.T.Helper()
	var r *domain.Restore
	require.Eventually(e.T, func() bool {
		got, ok, err := projections.Get[domain.Restore](e.Cache, e.ref(domain.RestoreKind, name))
		r = got
		return err == nil && ok && got.Status.Final()
	}, 60*time.Second, 10*time.Millisecond, "restore %s done", name)
	return *r
}

func (e *env) backupList() []domain.EtcdBackup {
	e.T.Helper()
	bs, err := projections.List[domain.EtcdBackup](e.Cache, domain.EtcdBackupKind, projections.ListOptions{Tenant: e.Tenant})
	require.NoError(e.T, err)
	return bs
}

// etcd calls the emulator's etcd HTTP API and decodes its answer.
func (e *env) etcd(method, path, body string) emulator.EtcdData {
	e.T.Helper()
	req, err := http.NewRequestWithContext(e.Ctx, method, e.api.URL+"/v1/clusters/"+url.PathEscape(e.cluster)+"/etcd"+path, strings.NewReader(body))
	require.NoError(e.T, err)
	req.Header.Set("Authorization", "Bearer "+e.Em.APIToken())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.T, err)
	require.Less(e.T, resp.StatusCode, 300, "%s %s: %s", method, path, raw)
	var d emulator.EtcdData
	if len(raw) > 0 {
		require.NoError(e.T, json.Unmarshal(raw, &d))
	}
	return d
}

func (e *env) putKey(k, v string) emulator.EtcdData { return e.etcd(http.MethodPut, "/keys/"+k, v) }
func (e *env) etcdData() emulator.EtcdData          { return e.etcd(http.MethodGet, "", "") }
func (e *env) wipe()                                { e.etcd(http.MethodDelete, "", "") }
