package configsync

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Controller is the day-2 config controller; New builds it, Run runs it.
type Controller struct {
	cfg Config
	controller.Base
	rec talos.ConfigRecorder

	mu sync.Mutex
	// rendered remembers, per tenant, the status fields configs are
	// rendered from (endpoint, Kubernetes version), so that the tenant's
	// other status writes (health, counts) queue nothing. Lost on restart:
	// a tenant not in it is queued.
	rendered map[string]string
}

// New returns the controller of cfg (see Config.Validate); Run starts it.
func New(cfg Config) *Controller {
	cfg.setDefaults()
	c := &Controller{cfg: cfg, rendered: map[string]string{},
		rec: talos.ConfigRecorder{Store: cfg.Store, Actor: Actor, Now: cfg.Now, Hint: cfg.Cache}}
	c.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Tenants: cfg.Tenants, Name: "config controller",
		Lease: Lease, Consumer: Consumer, Queue: Queue, Description: "tenants whose machine configs are to be looked at",
		Kinds:       eventKinds,
		Concurrency: cfg.Concurrency, Backoff: controller.Exponential(cfg.BackoffBase, cfg.BackoffMax),
		Clock: cfg.Clock, Log: cfg.Log,
		// Every tenant is queued when this replica leads: what changed while
		// no replica led (or before this controller existed) is looked at.
		ReadModel: cfg.Cache, Pending: c.allTenants,
	}, runtimeController{c})
	return c
}

// eventKinds are the kinds whose events can change a tenant's rendered
// configs or what its machines hold.
var eventKinds = []*domain.KindInfo{domain.TenantKind, domain.NodeGroupKind, domain.ConfigPatchKind, domain.MachineKind, domain.UpgradeKind}

// runtimeController is the controller as the runtime drives it: keys are tenants.
type runtimeController struct{ c *Controller }

func (c *Controller) allTenants(context.Context) ([]string, error) {
	tenants, err := projections.List[domain.Tenant](c.cfg.Cache, domain.TenantKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(tenants))
	for i, t := range tenants {
		names[i] = t.Metadata.Name
	}
	return names, nil
}

// Keys maps an event to the tenant whose configs it may change, once the
// read model the reconcile decides on has the event.
func (r runtimeController) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	keys := r.keys(ev)
	if len(keys) > 0 && r.c.cfg.Cache != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.c.cfg.Cache.WaitFor(wctx, seq)
		cancel()
		if err != nil {
			// The event comes again: its tenant must count as changed then.
			if ev.Object.Kind == domain.TenantKind.Kind {
				r.c.forget(ev.Object.Metadata.Name)
			}
			return nil, err
		}
		// A tenant without machines has no config to apply: the machine
		// that comes first queues it (a tenant created without node groups
		// costs no queue write).
		keys = slices.DeleteFunc(keys, func(tenant string) bool {
			return r.c.cfg.Cache.Count(domain.MachineKind.Kind, tenant) == 0
		})
	}
	return keys, nil
}

func (r runtimeController) keys(ev *domain.Event) []string {
	if ev.Actor == Actor {
		return nil
	}
	o := ev.Object
	status := strings.HasSuffix(ev.Type, "StatusUpdated")
	switch o.Kind {
	case domain.TenantKind.Kind:
		if ev.Action == domain.ActionDeleted {
			r.c.forget(o.Metadata.Name)
			return nil
		}
		if status && !r.c.renderInputsChanged(o) {
			return nil
		}
		return []string{o.Metadata.Name}
	case domain.NodeGroupKind.Kind, domain.ConfigPatchKind.Kind:
		if status {
			return nil
		}
		return []string{o.Metadata.Tenant}
	case domain.MachineKind.Kind:
		// A new machine, a new address or hostname, a config another writer
		// applied; observations (status) and removals change no config.
		if status || ev.Action == domain.ActionDeleted || strings.HasSuffix(ev.Type, "DeletionRequested") {
			return nil
		}
		return []string{o.Metadata.Tenant}
	case domain.UpgradeKind.Kind:
		// The end of an upgrade, its removal, or its wait for a maintenance
		// window releases the tenant it held back.
		if ev.Action == domain.ActionDeleted {
			return []string{o.Metadata.Tenant}
		}
		if !status {
			return nil
		}
		var st domain.UpgradeStatus
		if json.Unmarshal(o.Status, &st) != nil || st.HoldsBack() {
			return nil
		}
		return []string{o.Metadata.Tenant}
	}
	return nil
}

// renderInputsChanged reports whether a tenant's status changed what its
// configs are rendered from since the last one seen.
func (c *Controller) renderInputsChanged(o *domain.Object) bool {
	var st domain.TenantStatus
	if json.Unmarshal(o.Status, &st) != nil {
		return true
	}
	key := st.EndpointAddress + "|" + st.KubernetesVersion
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, seen := c.rendered[o.Metadata.Name]
	c.rendered[o.Metadata.Name] = key
	return !seen || prev != key
}

func (c *Controller) forget(tenant string) {
	c.mu.Lock()
	delete(c.rendered, tenant)
	c.mu.Unlock()
}

// Due debounces: a tenant is looked at once its changes are quiet for Debounce.
func (r runtimeController) Due(_ string, e controller.Entry) time.Time {
	return e.Last.Add(r.c.cfg.Debounce)
}

// Reconcile brings the tenant's machines to their rendered configs.
func (r runtimeController) Reconcile(ctx context.Context, tenant string, _ controller.Entry, attempt int) controller.Result {
	return r.c.reconcile(ctx, tenant, attempt)
}
