package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// VersionsBucket remembers the Talos version each node group was last
// declared at (key "<tenant>.<nodegroup>"), so the saga tells a change of a
// tenant's or node group's talosVersion from their other changes, and starts
// one run per change even when the event is delivered twice.
const VersionsBucket = "rezus-upgrade-versions"

// Labels and annotations of the runs the saga starts itself.
const (
	// LabelTrigger is "tenant" or "nodegroup": whose talosVersion changed.
	LabelTrigger = "rezuscloud.io/trigger"
	// AnnotationCause is the change, "<Kind>/<name>@<resourceVersion>".
	AnnotationCause = "rezuscloud.io/cause"
)

func openVersionsBucket(ctx context.Context, s *eventstore.Store) (jetstream.KeyValue, error) {
	kv, err := s.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: VersionsBucket, Description: "the Talos version each node group was last declared at", History: 1,
		Storage: jetstream.FileStorage, Replicas: s.Replicas(),
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", VersionsBucket, err)
	}
	return kv, nil
}

// trigger compares the version every node group of the event's tenant is
// declared at with the one remembered, and starts a run for the groups whose
// version changed (one run per target version). A group seen for the first
// time is remembered; it starts a run only if its machines are observed on
// another version (the saga was not running when its version changed). Only
// the latest declared version counts, as for every declared state: an event
// older than its object's last one changes nothing (the later one decides,
// or has decided), so changes in quick succession make one run, to the last.
func (s *Saga) trigger(ctx context.Context, kv jetstream.KeyValue, ev *domain.Event, seq uint64) error {
	obj := ev.Object
	tenantName := obj.Metadata.Tenant
	if obj.Kind == domain.TenantKind.Kind {
		tenantName = obj.Metadata.Name
	}
	// An event redelivered after a newer spec of its object (a handover, a
	// retry) is stale: the newer event decides, or has decided. Generations
	// count spec changes only, so status writes in between do not matter.
	if cur, ok := s.cfg.Cache.GetObject(obj.Ref()); ok && (cur.Metadata.UID != obj.Metadata.UID || cur.Metadata.Generation > obj.Metadata.Generation) {
		return nil
	}
	if ev.Action == domain.ActionDeleted {
		prefix := tenantName + "."
		if obj.Kind == domain.NodeGroupKind.Kind {
			prefix += obj.Metadata.Name
			return ignoreNoKey(kv.Purge(ctx, prefix))
		}
		return forgetTenantVersions(ctx, kv, tenantName)
	}
	tenant, ok, err := projections.Get[domain.Tenant](s.cfg.Cache, domain.TenantRef(tenantName))
	if err != nil || !ok {
		return err
	}
	if obj.Kind == domain.TenantKind.Kind {
		if err := objectAs(obj, tenant); err != nil {
			return err
		}
	}
	if tenant.Metadata.DeletionTimestamp != nil {
		return nil
	}
	groups, err := projections.List[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenantName})
	if err != nil {
		return err
	}
	if obj.Kind == domain.NodeGroupKind.Kind {
		var ng domain.NodeGroup
		if err := objectAs(obj, &ng); err != nil {
			return err
		}
		found := false
		for i := range groups {
			if groups[i].Metadata.Name == ng.Metadata.Name {
				groups[i], found = ng, true
			}
		}
		if !found {
			groups = append(groups, ng)
		}
	}
	machines, err := projections.List[domain.Machine](s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenantName})
	if err != nil {
		return err
	}
	changed := map[string][]domain.NodeGroup{} // by target version
	for _, ng := range groups {
		if ng.Metadata.DeletionTimestamp != nil {
			continue
		}
		// Each event decides only what it can change: a node group event its
		// own group, a tenant event the groups that follow the tenant's
		// version. The read model may be ahead of the event; a group's own
		// later change is decided (and labelled) by its own event.
		if obj.Kind == domain.NodeGroupKind.Kind && ng.Metadata.Name != obj.Metadata.Name {
			continue
		}
		if obj.Kind == domain.TenantKind.Kind && ng.Spec.TalosVersion != "" {
			continue
		}
		desired := ng.Spec.TalosVersion
		if desired == "" {
			desired = tenant.Spec.TalosVersion
		}
		key := tenantName + "." + ng.Metadata.Name
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if groupDrifted(ng.Metadata.Name, desired, machines) {
				changed[desired] = append(changed[desired], ng)
			} else if _, err := kv.Create(ctx, key, []byte(desired)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
		case err != nil:
			return err
		case string(e.Value()) != desired:
			changed[desired] = append(changed[desired], ng)
		}
	}
	versions := make([]string, 0, len(changed))
	for v := range changed {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		// Groups without machines yet are built on the new version: no run.
		if hasMachines(changed[v], machines) {
			if err := s.startRun(ctx, ev, seq, tenantName, v, changed[v], len(groups)); err != nil {
				return err
			}
		}
		// Remembered only once the run exists: a crash in between delivers
		// the event again and finds the run by its name.
		for _, ng := range changed[v] {
			if _, err := kv.Put(ctx, tenantName+"."+ng.Metadata.Name, []byte(v)); err != nil {
				return err
			}
		}
	}
	return nil
}

// rememberVersions records the version of every node group not remembered
// yet, as the read model has it.
func (s *Saga) rememberVersions(ctx context.Context, kv jetstream.KeyValue) error {
	tenants, err := projections.List[domain.Tenant](s.cfg.Cache, domain.TenantKind, projections.ListOptions{})
	if err != nil {
		return err
	}
	versions := map[string]string{}
	for _, t := range tenants {
		versions[t.Metadata.Name] = t.Spec.TalosVersion
	}
	groups, err := projections.List[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{})
	if err != nil {
		return err
	}
	for _, ng := range groups {
		desired := ng.Spec.TalosVersion
		if desired == "" {
			desired = versions[ng.Metadata.Tenant]
		}
		if desired == "" {
			continue
		}
		if _, err := kv.Create(ctx, ng.Metadata.Tenant+"."+ng.Metadata.Name, []byte(desired)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
	}
	return nil
}

// hasMachines reports whether any of the groups has a machine.
func hasMachines(groups []domain.NodeGroup, machines []domain.Machine) bool {
	for _, ng := range groups {
		for _, m := range machines {
			if m.Spec.NodeGroup == ng.Metadata.Name {
				return true
			}
		}
	}
	return false
}

// groupDrifted reports whether a group's machines are observed on another version.
func groupDrifted(group, desired string, machines []domain.Machine) bool {
	for _, m := range machines {
		if m.Spec.NodeGroup == group && m.Status.TalosVersion != "" && m.Status.TalosVersion != desired {
			return true
		}
	}
	return false
}

// startRun creates the Upgrade for groups whose version changed to version.
// Its name comes from the event, so a redelivered event finds it made.
func (s *Saga) startRun(ctx context.Context, ev *domain.Event, seq uint64, tenant, version string, groups []domain.NodeGroup, total int) error {
	spec := domain.UpgradeSpec{TalosVersion: version, MaxParallelism: 0}
	for _, ng := range groups {
		spec.NodeGroups = append(spec.NodeGroups, ng.Metadata.Name)
		if ng.Spec.Role == domain.RoleWorker {
			if mp := ng.Spec.UpdateStrategy.MaxParallelism; mp > 0 && (spec.MaxParallelism == 0 || mp < spec.MaxParallelism) {
				spec.MaxParallelism = mp
			}
		}
	}
	if len(groups) == total {
		spec.NodeGroups = nil
	}
	trigger := strings.ToLower(ev.Object.Kind)
	name := upgradeName(version, seq)
	obj := &domain.Object{
		Metadata: domain.ObjectMeta{Name: name, Tenant: tenant,
			Labels:      map[string]string{LabelTrigger: trigger},
			Annotations: map[string]string{AnnotationCause: fmt.Sprintf("%s/%s@%d", ev.Object.Kind, ev.Object.Metadata.Name, seq)}},
		Spec: upgradeJSON(spec),
	}
	ref := domain.Ref{Kind: domain.UpgradeKind.Kind, Tenant: tenant, Name: name}
	res, err := s.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: Actor,
		CorrelationID: ev.CorrelationID, Now: s.cfg.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{MsgID: "upgrade-trigger-" + name})
	if domain.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("starting an upgrade of tenant %s to %s: %w", tenant, version, err)
	}
	if !res.Duplicate {
		s.cfg.Log.Info("upgrade queued by a version change", "tenant", tenant, "upgrade", name, "to", version, "nodeGroups", spec.NodeGroups, "cause", obj.Metadata.Annotations[AnnotationCause])
	}
	return nil
}

// upgradeName is "talos-<version>-<seq>" with the version made a DNS label.
func upgradeName(version string, seq uint64) string {
	var b strings.Builder
	for _, c := range strings.ToLower(version) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	suffix := "-" + strconv.FormatUint(seq, 10)
	v := strings.Trim(b.String(), "-")
	if room := domain.MaxNameLength - len("talos-") - len(suffix); len(v) > room {
		v = strings.Trim(v[:room], "-")
	}
	return "talos-" + v + suffix
}

func forgetTenantVersions(ctx context.Context, kv jetstream.KeyValue, tenant string) error {
	lister, err := kv.ListKeysFiltered(ctx, tenant+".*")
	if err != nil {
		return ignoreNoKey(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := kv.Purge(ctx, k); err != nil {
			return ignoreNoKey(err)
		}
	}
	return nil
}

func ignoreNoKey(err error) error {
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	return err
}

// decodeObject reads an event's post-image into a typed view.
func objectAs(obj *domain.Object, v any) error {
	return json.Unmarshal(upgradeJSON(obj), v)
}
