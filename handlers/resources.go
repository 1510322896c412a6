package handlers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// resource serves the REST verbs of one kind.
type resource struct {
	api   *API
	kind  *domain.KindInfo
	hooks kindHooks
}

// ref reads the object reference from the URL, checking that the names in it
// are names at all (they become NATS subject tokens).
func (r *resource) ref(c echo.Context) (domain.Ref, error) {
	ref := domain.Ref{Kind: r.kind.Kind}
	if r.kind == domain.TenantKind {
		ref.Name = c.Param("tenant")
	} else {
		ref.Name = c.Param("name")
		if r.kind.TenantScoped {
			ref.Tenant = c.Param("tenant")
		}
	}
	if ref.Tenant != "" {
		if causes := domain.ValidateName(ref.Tenant, "metadata.tenant"); causes != nil {
			return ref, domain.NewBadRequest("invalid tenant name in the URL", causes...)
		}
	}
	if c.Param("name") != "" || r.kind == domain.TenantKind && c.Param("tenant") != "" {
		if causes := domain.ValidateName(ref.Name, "metadata.name"); causes != nil {
			return ref, domain.NewBadRequest("invalid name in the URL", causes...)
		}
	}
	return ref, nil
}

func (r *resource) get(c echo.Context) error {
	ref, err := r.ref(c)
	if err != nil {
		return err
	}
	if err := r.api.readBarrier(c.Request().Context()); err != nil {
		return err
	}
	raw, ok := r.api.cache.Get(ref)
	if !ok || !r.hooks.visible(c, raw) {
		return domain.NewNotFound(r.kind.Kind, ref.Name)
	}
	return c.JSONBlob(http.StatusOK, raw)
}

func (r *resource) list(c echo.Context) error {
	q := c.QueryParams()
	if w := q.Get("watch"); w == "true" || w == "1" {
		return r.watch(c)
	}
	opts, err := r.listOptions(c)
	if err != nil {
		return err
	}
	if lim := q.Get("limit"); lim != "" {
		n, err := strconv.Atoi(lim)
		if err != nil || n < 0 {
			return domain.NewBadRequest("limit must be a non-negative integer",
				domain.Cause{Field: "limit", Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not a non-negative integer", lim)})
		}
		opts.Limit = n
	}
	opts.Continue = q.Get("continue")
	if err := r.api.readBarrier(c.Request().Context()); err != nil {
		return err
	}
	res, err := r.api.cache.List(r.kind.Kind, opts)
	if errors.Is(err, projections.ErrBadContinue) {
		return domain.NewBadRequest("the continue token is not valid; start the list again",
			domain.Cause{Field: "continue", Type: domain.CauseInvalid, Message: "not a token this server issued"})
	}
	if err != nil {
		return err
	}
	if _, filtered := r.hooks.(visibilityFilter); filtered {
		kept := res.Items[:0]
		for _, raw := range res.Items {
			if r.hooks.visible(c, raw) {
				kept = append(kept, raw)
			}
		}
		res.Items, res.Remaining = kept, 0
	}
	if opts.Tenant == "" && r.api.filterListByTenant(c, r.kind, &res) {
		res.Remaining = 0 // lists leave out the tenants the caller may not see
	}
	return writeList(c, r.kind.Kind, res)
}

// listBuffer is the size of the buffer a list is written through. A list is
// streamed: its items are the read model's own bytes, and copying 50,000 of
// them into one body first would hold a second copy of them (20 MB) per list
// in flight.
const listBuffer = 64 << 10

// writeList answers a list: the envelope and the items as the read model
// holds them, written as they go. A small list (under listBuffer) goes in one
// write with its Content-Length.
func writeList(c echo.Context, kind string, res projections.ListResult) error {
	size := 128 + len(res.Continue)
	for _, raw := range res.Items {
		size += len(raw) + 1
	}
	if size <= listBuffer {
		var b bytes.Buffer
		b.Grow(size)
		writeListTo(&b, kind, res)
		return c.JSONBlob(http.StatusOK, b.Bytes())
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(http.StatusOK)
	w := bufio.NewWriterSize(c.Response(), listBuffer)
	writeListTo(w, kind, res)
	// A write error is the client's connection gone: nothing to answer.
	_ = w.Flush()
	return nil
}

// listWriter is what a list is written to.
type listWriter interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

func writeListTo(w listWriter, kind string, res projections.ListResult) {
	w.WriteString(`{"apiVersion":"` + domain.APIVersion + `","kind":"` + kind + `List","metadata":{"resourceVersion":"`)
	w.WriteString(strconv.FormatUint(res.Seq, 10))
	w.WriteString(`"`)
	if res.Continue != "" {
		w.WriteString(`,"continue":"` + res.Continue + `"`)
		if res.Remaining > 0 {
			w.WriteString(`,"remainingItemCount":` + strconv.Itoa(res.Remaining))
		}
	}
	w.WriteString(`},"items":[`)
	for i, raw := range res.Items {
		if i > 0 {
			w.WriteByte(',')
		}
		w.Write(raw)
	}
	w.WriteString("]}")
}

// listOptions reads the scope and label selector shared by list and watch.
func (r *resource) listOptions(c echo.Context) (projections.ListOptions, error) {
	var opts projections.ListOptions
	if r.kind.TenantScoped && c.Param("tenant") != "" {
		if causes := domain.ValidateName(c.Param("tenant"), "metadata.tenant"); causes != nil {
			return opts, domain.NewBadRequest("invalid tenant name in the URL", causes...)
		}
		opts.Tenant = c.Param("tenant")
	}
	sel, err := domain.ParseSelector(c.QueryParam("labelSelector"))
	if err != nil {
		return opts, err
	}
	opts.Selector = sel
	return opts, nil
}

// maxBody bounds the kind's request bodies: a Provider may carry a module
// (domain.MaxModuleBytes of files, JSON-escaped).
func (r *resource) maxBody() int64 {
	if r.kind == domain.ProviderKind {
		return max(r.api.cfg.MaxBodyBytes, r.api.cfg.MaxProviderBodyBytes)
	}
	return r.api.cfg.MaxBodyBytes
}

func (r *resource) create(c echo.Context) error {
	dry, err := dryRunParam(c)
	if err != nil {
		return err
	}
	obj, err := r.api.readObject(c, "application/json", r.maxBody())
	if err != nil {
		return err
	}
	ref := domain.Ref{Kind: r.kind.Kind}
	if r.kind.TenantScoped {
		tenant := c.Param("tenant")
		if causes := domain.ValidateName(tenant, "metadata.tenant"); causes != nil {
			return domain.NewBadRequest("invalid tenant name in the URL", causes...)
		}
		ref.Tenant = tenant
		if err := r.api.tenantAcceptsObjects(c.Request().Context(), tenant); err != nil {
			return err
		}
	}
	after, err := r.hooks.admit(c, domain.OpCreate, ref, obj)
	if err != nil {
		return err
	}
	ref.Name = obj.Metadata.Name
	if ref.Name == "" {
		return domain.NewInvalid(r.kind.Kind, "", []domain.Cause{{Field: "metadata.name", Type: domain.CauseRequired, Message: "name is required"}})
	}
	if causes := domain.ValidateName(ref.Name, "metadata.name"); causes != nil {
		return domain.NewInvalid(r.kind.Kind, ref.Name, causes)
	}
	cmd := r.api.command(c, domain.OpCreate, ref, obj)
	if dry {
		return r.dryRunCreate(c, cmd)
	}
	res, err := r.api.store.Execute(c.Request().Context(), cmd, eventstore.UpdateOptions{Hint: r.api.cache, MsgID: r.api.msgID(c)})
	if err != nil {
		return err
	}
	return r.api.respondAfter(c, http.StatusCreated, res, after)
}

func (r *resource) update(c echo.Context) error {
	dry, err := dryRunParam(c)
	if err != nil {
		return err
	}
	ref, err := r.ref(c)
	if err != nil {
		return err
	}
	obj, err := r.api.readObject(c, "application/json", r.maxBody())
	if err != nil {
		return err
	}
	if err := requireVersion(r.kind, ref, obj); err != nil {
		return err
	}
	after, err := r.hooks.admit(c, domain.OpUpdate, ref, obj)
	if err != nil {
		return err
	}
	cmd := r.api.command(c, domain.OpUpdate, ref, obj)
	cmd.ExpectedVersion = obj.Metadata.ResourceVersion
	cmd.Dependents = r.api.dependents(ref)
	if dry {
		return r.dryRunUpdate(c, cmd)
	}
	res, err := r.api.store.Execute(c.Request().Context(), cmd, eventstore.UpdateOptions{Hint: r.api.cache, MsgID: r.api.msgID(c)})
	if err != nil {
		return err
	}
	return r.api.respondAfter(c, http.StatusOK, res, after)
}

func (r *resource) updateStatus(c echo.Context) error {
	ref, err := r.ref(c)
	if err != nil {
		return err
	}
	obj, err := r.api.readObject(c, "application/json", r.maxBody())
	if err != nil {
		return err
	}
	if err := requireVersion(r.kind, ref, obj); err != nil {
		return err
	}
	cmd := r.api.command(c, domain.OpUpdateStatus, ref, obj)
	cmd.ExpectedVersion = obj.Metadata.ResourceVersion
	res, err := r.api.store.Execute(c.Request().Context(), cmd, eventstore.UpdateOptions{Hint: r.api.cache, MsgID: r.api.msgID(c)})
	if err != nil {
		return err
	}
	return r.api.respond(c, http.StatusOK, res)
}

func requireVersion(kind *domain.KindInfo, ref domain.Ref, obj *domain.Object) error {
	rv := obj.Metadata.ResourceVersion
	if rv == "" {
		return domain.NewInvalid(kind.Kind, ref.Name, []domain.Cause{{Field: "metadata.resourceVersion", Type: domain.CauseRequired,
			Message: "must be specified for an update; read the object, change it and send it back"}})
	}
	if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
		return domain.NewInvalid(kind.Kind, ref.Name, []domain.Cause{{Field: "metadata.resourceVersion", Type: domain.CauseInvalid,
			Message: fmt.Sprintf("%q is not a resourceVersion this server issued", rv)}})
	}
	return nil
}

// patch applies a JSON merge patch (RFC 7386) to the object. A patch that names
// metadata.resourceVersion is a precondition; one that does not is retried on
// conflicts against fresh state, as Kubernetes does.
func (r *resource) patch(c echo.Context) error { return r.doPatch(c, false) }

func (r *resource) patchStatus(c echo.Context) error { return r.doPatch(c, true) }

func (r *resource) doPatch(c echo.Context, status bool) error {
	dry, err := dryRunParam(c)
	if err != nil {
		return err
	}
	ref, err := r.ref(c)
	if err != nil {
		return err
	}
	body, err := r.api.readBodyLimit(c, "application/merge-patch+json", r.maxBody())
	if err != nil {
		return err
	}
	var patch map[string]any
	if err := json.Unmarshal(body, &patch); err != nil || patch == nil {
		return domain.NewBadRequest("the merge patch must be a JSON object")
	}
	var after afterWrite
	if !status {
		if after, err = r.hooks.admitPatch(c, ref, patch); err != nil {
			return err
		}
		if after != nil {
			body, _ = json.Marshal(patch) // without the write-only fields the hook took
		}
	}
	precondition := ""
	if md, ok := patch["metadata"].(map[string]any); ok {
		if rv, ok := md["resourceVersion"].(string); ok {
			precondition = rv
		}
	}
	op := domain.OpUpdate
	if status {
		op = domain.OpUpdateStatus
	}
	retries := 10
	if precondition != "" {
		retries = 0
	}
	ctx := c.Request().Context()
	decide := func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, domain.NewNotFound(r.kind.Kind, ref.Name)
		}
		if precondition != "" && precondition != state.Metadata.ResourceVersion {
			return nil, domain.NewConflict(r.kind.Kind, ref.Name, "the object has been modified; please apply your changes to the latest version and try again")
		}
		cur, err := json.Marshal(state)
		if err != nil {
			return nil, err
		}
		merged, err := mergePatch(cur, body)
		if err != nil {
			return nil, domain.NewBadRequest("applying the merge patch: " + err.Error())
		}
		obj := &domain.Object{}
		if causes := domain.DecodeStrict(merged, obj, ""); causes != nil {
			return nil, domain.NewBadRequest("the patched object is not valid JSON for "+r.kind.Kind, causes...)
		}
		cmd := r.api.command(c, op, ref, obj)
		cmd.ExpectedVersion = state.Metadata.ResourceVersion
		cmd.Dependents = r.api.dependents(ref)
		return domain.Decide(state, cmd)
	}
	if dry {
		return r.dryRunPatch(c, ref, decide)
	}
	res, err := r.api.store.Update(ctx, ref, eventstore.UpdateOptions{Hint: r.api.cache, MsgID: r.api.msgID(c), Retries: retries}, decide)
	if err != nil {
		return err
	}
	return r.api.respondAfter(c, http.StatusOK, res, after)
}

func (r *resource) delete(c echo.Context) error {
	if c.QueryParam("dryRun") != "" {
		// Refused rather than ignored: a dry run must never delete.
		return domain.NewBadRequest("dryRun is supported on create, update and patch, not on delete",
			domain.Cause{Field: "dryRun", Type: domain.CauseNotSupported, Message: "not supported on delete"})
	}
	ref, err := r.ref(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	after, err := r.hooks.admit(c, domain.OpDelete, ref, nil)
	if err != nil {
		return err
	}
	cmd := r.api.command(c, domain.OpDelete, ref, nil)
	cmd.Dependents = r.api.dependents(ref)
	if rv := c.QueryParam("resourceVersion"); rv != "" {
		cmd.ExpectedVersion = rv
	}
	res, err := r.api.store.Execute(ctx, cmd, eventstore.UpdateOptions{Hint: r.api.cache, MsgID: r.api.msgID(c), Retries: 3})
	if err != nil {
		return err
	}
	if r.kind == domain.TenantKind && res.Object != nil && r.api.finalizer != nil {
		// Cascade now rather than on the finalizer's next pass, so that a tenant
		// whose objects have no finalizers is gone when DELETE answers.
		if err := r.api.cache.WaitFor(ctx, res.Seq); err == nil {
			r.api.finalizer.Pass(ctx)
			if rec, err := r.api.store.Load(ctx, ref); err == nil && rec != nil {
				res = eventstore.Result{Object: rec.State(), Seq: rec.Seq}
				if res.Object == nil {
					img := rec.Event.Object.DeepCopy()
					img.Metadata.ResourceVersion = strconv.FormatUint(rec.Seq, 10)
					res.Last = img
				}
			}
		}
	}
	code := http.StatusOK
	if res.Object != nil {
		code = http.StatusAccepted
	}
	return r.api.respondAfter(c, code, res, after)
}

// dependents counts what must go before ref can: a tenant's objects.
func (a *API) dependents(ref domain.Ref) int {
	if ref.Kind != domain.TenantKind.Kind {
		return 0
	}
	return len(a.cache.Children(ref.Name))
}

// tenantAcceptsObjects checks that a tenant exists and is not being deleted.
func (a *API) tenantAcceptsObjects(ctx context.Context, tenant string) error {
	if err := a.readBarrier(ctx); err != nil {
		return err
	}
	terminating, ok := a.cache.IsTerminating(domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant})
	if !ok {
		return domain.NewNotFound(domain.TenantKind.Kind, tenant)
	}
	if terminating {
		return domain.NewForbidden(domain.TenantKind.Kind, tenant, "it is being deleted; no new objects can be created in it")
	}
	return nil
}
