package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/controllers/backup"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// EtcdBackupObjects opens the sealed objects of etcd backups
// (eventstore.EtcdBackups): a reader of the plain snapshot that fails when
// the object was altered or cut short.
type EtcdBackupObjects interface {
	Open(ctx context.Context, object string) (io.ReadCloser, error)
}

// etcdBackupRoutes serves a backup's snapshot and the restore shortcut.
//
//	GET  /tenants/{t}/etcdbackups/{name}/snapshot  the plain snapshot (edit role, audited as EtcdSnapshot)
//	POST /tenants/{t}/restore {"backup":"<name>"}   creates a Restore (201)
func (a *API) etcdBackupRoutes(g *authed) {
	g.GET("/tenants/:tenant/etcdbackups/:name/snapshot", a.etcdSnapshot)
	g.POST("/tenants/:tenant/restore", a.restoreTenant)
}

// etcdSnapshot streams a Succeeded backup's snapshot as etcd gave it. The
// object is opened as it streams; Content-Length is the snapshot's size, so
// a client sees an object that fails mid-way as a short body.
func (a *API) etcdSnapshot(c echo.Context) error {
	tenant, name, err := a.talosParams(c, true)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialEtcdSnapshot, tenant, name)
	// A snapshot is everything the cluster keeps: its Secrets, service
	// account and bootstrap tokens, and what they are encrypted with lives
	// in the configs only global admins read whole. Tenant admins and
	// editors make and restore backups but do not carry one away.
	if accessOf(c).Global() != domain.RoleAdmin {
		return domain.NewForbidden(CredentialEtcdSnapshot, name, "an etcd snapshot holds every secret of the cluster: only global admins download one (restoring needs no download)")
	}
	if a.etcdBackups == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "etcd backups are not enabled on this server"}
	}
	b, ok, err := projections.Get[domain.EtcdBackup](a.cache, domain.ObjectRef(domain.EtcdBackupKind, tenant, name))
	if err != nil {
		return err
	}
	if !ok {
		return domain.NewNotFound(domain.EtcdBackupKind.Kind, name)
	}
	if b.Status.Phase != domain.BackupSucceeded {
		return domain.NewConflict(domain.EtcdBackupKind.Kind, name, fmt.Sprintf("the backup is %s: only a Succeeded backup has a snapshot", b.Status.Phase))
	}
	rc, err := a.etcdBackups.Open(c.Request().Context(), eventstore.EtcdBackupObject(tenant, name, b.Metadata.UID))
	if errors.Is(err, eventstore.ErrBackupObjectNotFound) {
		return domain.NewNotFound("EtcdSnapshot", name)
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	// The first chunk is opened before the status is sent, so an object
	// damaged from its start answers a Status; damage further on ends the
	// body short of Content-Length.
	body := bufio.NewReaderSize(rc, 64<<10)
	if _, err := body.Peek(1); err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, eventstore.ErrSealedStreamDamaged) {
			return domain.NewConflict(domain.EtcdBackupKind.Kind, name, "the backup's object is damaged: "+err.Error())
		}
		return err
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/octet-stream")
	h.Set(echo.HeaderContentLength, strconv.FormatInt(b.Status.Size, 10))
	h.Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="%s-%s.snapshot"`, tenant, name))
	h.Set("X-Snapshot-Sha256", b.Status.SHA256)
	c.Response().WriteHeader(http.StatusOK)
	if _, err := io.Copy(c.Response(), body); err != nil {
		// The status is sent; the short body tells the client. Nothing of
		// the snapshot is logged.
		a.log.Warn("streaming an etcd snapshot", "tenant", tenant, "backup", name, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// restoreRequest is the body of POST /tenants/{t}/restore.
type restoreRequest struct {
	Backup    string                   `json:"backup"`
	Deadlines *domain.RestoreDeadlines `json:"deadlines,omitempty"`
}

// restoreTenant creates a Restore of the named backup, named restore-<time>,
// checked as a create of a Restore is (restoreHooks).
func (a *API) restoreTenant(c echo.Context) error {
	tenant := c.Param("tenant")
	if causes := domain.ValidateName(tenant, "metadata.tenant"); causes != nil {
		return domain.NewBadRequest("invalid tenant name in the URL", causes...)
	}
	body, err := a.readBody(c, "application/json")
	if err != nil {
		return err
	}
	var req restoreRequest
	if causes := domain.DecodeStrict(body, &req, ""); causes != nil {
		return domain.NewBadRequest("the request body is not valid: "+causeSummary(causes), causes...)
	}
	if err := a.tenantAcceptsObjects(c.Request().Context(), tenant); err != nil {
		return err
	}
	spec, _ := json.Marshal(domain.RestoreSpec{Backup: req.Backup, Deadlines: req.Deadlines})
	name := "restore-" + a.cfg.Now().UTC().Format("20060102-150405")
	obj := &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: spec}
	ref := domain.ObjectRef(domain.RestoreKind, tenant, name)
	if _, causes := domain.RestoreKind.NormalizeSpec(spec); causes != nil {
		for i := range causes {
			causes[i].Field = strings.TrimPrefix(causes[i].Field, "spec.") // the body's field
		}
		return domain.NewInvalid(domain.RestoreKind.Kind, name, causes)
	}
	if _, err := (&restoreHooks{a: a}).admit(c, domain.OpCreate, ref, obj); err != nil {
		return err
	}
	cmd := a.command(c, domain.OpCreate, ref, obj)
	res, err := a.store.Execute(c.Request().Context(), cmd, eventstore.UpdateOptions{Hint: a.cache, MsgID: a.msgID(c)})
	if err != nil {
		return err
	}
	return a.respond(c, http.StatusCreated, res)
}

// etcdBackupHooks: users create manual backups only (the schedule creates
// the others), each held by the finalizer that lets the controller delete
// its object first; a backup's spec never changes.
type etcdBackupHooks struct {
	noHooks
	a *API
}

func (h *etcdBackupHooks) admit(_ echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	switch op {
	case domain.OpCreate:
		var spec domain.EtcdBackupSpec
		if json.Unmarshal(obj.Spec, &spec) == nil && spec.Trigger == domain.BackupSchedule {
			return nil, domain.NewInvalid(domain.EtcdBackupKind.Kind, obj.Metadata.Name, []domain.Cause{{Field: "spec.trigger", Type: domain.CauseForbidden,
				Message: "scheduled backups are created by the tenant's schedule (spec.etcdBackup of the tenant); create a manual one"}})
		}
		if !slices.Contains(obj.Metadata.Finalizers, domain.BackupObjectFinalizer) {
			obj.Metadata.Finalizers = append(obj.Metadata.Finalizers, domain.BackupObjectFinalizer)
		}
	case domain.OpUpdate:
		return nil, h.sameSpec(ref, obj.Spec)
	}
	return nil, nil
}

func (h *etcdBackupHooks) admitPatch(_ echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	merged, ok := h.a.patchedSpec(ref, patch)
	if !ok {
		return nil, nil
	}
	return nil, h.sameSpec(ref, merged)
}

func (h *etcdBackupHooks) sameSpec(ref domain.Ref, raw json.RawMessage) error {
	cur, ok := h.a.cache.GetObject(ref)
	if !ok {
		return nil // the update answers NotFound itself
	}
	next, causes := domain.EtcdBackupKind.NormalizeSpec(raw)
	if causes != nil || string(next) == string(cur.Spec) {
		return nil // the normaliser reports bad fields itself
	}
	return domain.NewInvalid(domain.EtcdBackupKind.Kind, ref.Name, []domain.Cause{{Field: "spec", Type: domain.CauseForbidden,
		Message: "a backup's spec cannot change; take another backup"}})
}

// restoreHooks check a restore before it is stored: its backup must have
// Succeeded in the same tenant and its object must open whole (a tampered
// or truncated object is refused here, before anything reaches the nodes),
// no other restore of the tenant may be in flight, the spec never changes,
// and a running restore cannot be deleted.
type restoreHooks struct {
	noHooks
	a *API
}

func (h *restoreHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	switch op {
	case domain.OpCreate:
		return nil, h.checkCreate(c.Request().Context(), ref.Tenant, obj)
	case domain.OpUpdate:
		cur, ok := h.a.cache.GetObject(ref)
		if !ok {
			return nil, nil
		}
		if next, causes := domain.RestoreKind.NormalizeSpec(obj.Spec); causes == nil && string(next) != string(cur.Spec) {
			return nil, domain.NewInvalid(domain.RestoreKind.Kind, ref.Name, []domain.Cause{{Field: "spec.backup", Type: domain.CauseForbidden,
				Message: "a restore's spec cannot change; create another restore"}})
		}
	case domain.OpDelete:
		r, ok, _ := projections.Get[domain.Restore](h.a.cache, ref)
		if ok && r.Status.Phase == domain.RestoreRunning {
			return nil, domain.NewConflict(domain.RestoreKind.Kind, ref.Name, "the restore is running; delete it once it has finished")
		}
	}
	return nil, nil
}

func (h *restoreHooks) admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	if _, ok := patch["spec"]; ok {
		return nil, domain.NewInvalid(domain.RestoreKind.Kind, ref.Name, []domain.Cause{{Field: "spec.backup", Type: domain.CauseForbidden,
			Message: "a restore's spec cannot change; create another restore"}})
	}
	return nil, nil
}

func (h *restoreHooks) checkCreate(ctx context.Context, tenant string, obj *domain.Object) error {
	var spec domain.RestoreSpec
	out, causes := domain.RestoreKind.NormalizeSpec(obj.Spec)
	if causes != nil || json.Unmarshal(out, &spec) != nil {
		return nil // the create reports the fields
	}
	name := obj.Metadata.Name
	invalid := func(msg string) error {
		return domain.NewInvalid(domain.RestoreKind.Kind, name, []domain.Cause{{Field: "spec.backup", Type: domain.CauseInvalid, Message: msg}})
	}
	b, ok, err := projections.Get[domain.EtcdBackup](h.a.cache, domain.ObjectRef(domain.EtcdBackupKind, tenant, spec.Backup))
	switch {
	case err != nil:
		return err
	case !ok:
		return invalid(fmt.Sprintf("backup %q does not exist in tenant %q", spec.Backup, tenant))
	case b.Status.Phase != domain.BackupSucceeded:
		return invalid(fmt.Sprintf("backup %q is %s; only a Succeeded backup can be restored", spec.Backup, b.Status.Phase))
	case b.Metadata.DeletionTimestamp != nil:
		return invalid(fmt.Sprintf("backup %q is being deleted", spec.Backup))
	}
	restores, err := projections.List[domain.Restore](h.a.cache, domain.RestoreKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	for _, r := range restores {
		if !r.Status.Final() {
			return domain.NewConflict(domain.RestoreKind.Kind, name, fmt.Sprintf("restore %q of tenant %q has not finished", r.Metadata.Name, tenant))
		}
	}
	if h.a.etcdBackups == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "etcd backups are not enabled on this server"}
	}
	if err := backup.VerifyBackup(ctx, h.a.etcdBackups, *b); err != nil {
		if errors.Is(err, backup.ErrStore) {
			return err
		}
		return invalid(fmt.Sprintf("backup %q cannot be restored: %v; nothing was changed", spec.Backup, err))
	}
	return nil
}
