package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// VersionsBucket remembers the Talos version each node group was last
// declared at (key "<tenant>.<nodegroup>") and the Kubernetes version each
// tenant was (key "<tenant>._kubernetes": "_" is in no object name, so it
// never meets a node group's key), so the saga tells a change of a tenant's or
// node group's version from their other changes, and starts one run per
// change even when the event is delivered twice.
const VersionsBucket = "rezus-upgrade-versions"

// kubernetesKey is the versions bucket's key suffix of a tenant's declared
// Kubernetes version.
const kubernetesKey = "_kubernetes"

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
	if uid, gen, ok := s.cfg.Cache.Identity(obj.Ref()); ok && (uid != obj.Metadata.UID || gen > obj.Metadata.Generation) {
		return nil
	}
	if ev.Action == domain.ActionDeleted {
		prefix := tenantName + "."
		if obj.Kind == domain.NodeGroupKind.Kind {
			prefix += obj.Metadata.Name
			return ignoreNoKey(kv.Purge(ctx, prefix))
		}
		s.forgetTenantHead(tenantName)
		return forgetTenantVersions(ctx, s.cfg.Store.JetStream(), kv, tenantName)
	}
	tenant, ok, err := s.eventTenant(obj, tenantName)
	if err != nil || !ok {
		return err
	}
	if tenant.Metadata.DeletionTimestamp != nil {
		return nil
	}
	groups, total, machines, err := s.triggerScope(obj, tenantName)
	if err != nil {
		return err
	}
	changed := map[string][]domain.NodeGroup{} // by target version
	reimage := map[string][]domain.NodeGroup{} // by the version they stay on
	ids := schematicIDs{}
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
		// A group with its own version follows the tenant only in its
		// schematic (when it has none of its own): a tenant event may
		// re-image it, never change its version.
		schematicOnly := obj.Kind == domain.TenantKind.Kind && ng.Spec.TalosVersion != ""
		if schematicOnly && ownsSchematic(&ng.Spec) {
			continue
		}
		desired := ng.Spec.TalosVersion
		if desired == "" {
			desired = tenant.Spec.TalosVersion
		}
		want := declaredBuildOf(&tenant.Spec, &ng.Spec, desired, ids)
		key := tenantName + "." + ng.Metadata.Name
		e, err := kv.Get(ctx, key)
		switch {
		case schematicOnly && (errors.Is(err, jetstream.ErrKeyNotFound) || err == nil && rememberedVersion(string(e.Value())) != desired):
			// The group's own event decides (and labels) its version, and
			// remembers it: not this one, whose read model may be ahead.
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if groupDrifted(ng.Metadata.Name, desired, machines) {
				changed[desired] = append(changed[desired], ng)
			} else if _, err := kv.Create(ctx, key, []byte(want)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
		case err != nil:
			return err
		case string(e.Value()) == want:
		case rememberedVersion(string(e.Value())) != desired:
			changed[desired] = append(changed[desired], ng)
		default:
			// The same version, another schematic: a re-image.
			reimage[desired] = append(reimage[desired], ng)
		}
	}
	if err := s.startReimages(ctx, kv, ev, seq, tenant, reimage, total, machines); err != nil {
		return err
	}
	versions := make([]string, 0, len(changed))
	for v := range changed {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		// Groups without machines yet are built on the new version: no run.
		if hasMachines(changed[v], machines) {
			if err := s.startRun(ctx, ev, seq, tenantName, talosRunSpec(v, changed[v], total)); err != nil {
				return err
			}
		}
		// Remembered only once the run exists: a crash in between delivers
		// the event again and finds the run by its name.
		for _, ng := range changed[v] {
			if _, err := kv.Put(ctx, tenantName+"."+ng.Metadata.Name, []byte(declaredBuild(&tenant.Spec, &ng.Spec, v))); err != nil {
				return err
			}
		}
	}
	// A Kubernetes run goes after the Talos runs of the same change: a
	// Kubernetes version the old Talos does not run may need the new one.
	if obj.Kind == domain.TenantKind.Kind {
		return s.triggerKubernetes(ctx, kv, ev, seq, tenant, groups, machines)
	}
	return nil
}

// triggerScope reads what an event can change: a node group event its own
// group (as the event has it) and that group's machines, so its cost does not
// grow with the tenant; a tenant event every group of the tenant and its
// machines (a tenant's version reaches all of them). total is how many
// groups the tenant has.
func (s *Saga) triggerScope(obj *domain.Object, tenant string) (groups []domain.NodeGroup, total int, machines []domain.Machine, err error) {
	if obj.Kind == domain.NodeGroupKind.Kind {
		ng := domain.NodeGroup{APIVersion: obj.APIVersion, Kind: obj.Kind, Metadata: obj.Metadata}
		if err := decodeParts(obj, &ng.Spec, &ng.Status); err != nil {
			return nil, 0, nil, err
		}
		total = s.cfg.Cache.Count(domain.NodeGroupKind.Kind, tenant)
		if _, ok := s.cfg.Cache.Get(obj.Ref()); !ok {
			total++ // deleted since: the event still counts it
		}
		machines, err = projections.InGroup[domain.Machine](s.cfg.Cache, domain.MachineKind, tenant, ng.Metadata.Name)
		return []domain.NodeGroup{ng}, total, machines, err
	}
	groups, err = projections.List[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, 0, nil, err
	}
	machines, err = projections.List[domain.Machine](s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	return groups, len(groups), machines, err
}

// rememberVersions records the Talos version of every node group and the
// Kubernetes version of every tenant not remembered yet, as the read model
// has them.
func (s *Saga) rememberVersions(ctx context.Context, kv jetstream.KeyValue) error {
	tenants, err := projections.List[domain.Tenant](s.cfg.Cache, domain.TenantKind, projections.ListOptions{})
	if err != nil {
		return err
	}
	versions := map[string]string{}
	for _, t := range tenants {
		versions[t.Metadata.Name] = t.Spec.TalosVersion
		if v := t.Spec.KubernetesVersion; v != "" {
			if _, err := kv.Create(ctx, t.Metadata.Name+"."+kubernetesKey, []byte(v)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
		}
	}
	groups, err := projections.List[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{})
	if err != nil {
		return err
	}
	specs := map[string]*domain.TenantSpec{}
	for i := range tenants {
		specs[tenants[i].Metadata.Name] = &tenants[i].Spec
	}
	for _, ng := range groups {
		desired := ng.Spec.TalosVersion
		if desired == "" {
			desired = versions[ng.Metadata.Tenant]
		}
		if desired == "" {
			continue
		}
		if _, err := kv.Create(ctx, ng.Metadata.Tenant+"."+ng.Metadata.Name, []byte(declaredBuild(specs[ng.Metadata.Tenant], &ng.Spec, desired))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
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

// talosRunSpec is the spec of a run for groups whose version changed to
// version: the smallest maxParallelism of their worker groups, and no node
// groups when they are all of the tenant's (total).
func talosRunSpec(version string, groups []domain.NodeGroup, total int) domain.UpgradeSpec {
	spec := domain.UpgradeSpec{TalosVersion: version, MaxParallelism: 0}
	for _, ng := range groups {
		spec.NodeGroups = append(spec.NodeGroups, ng.Metadata.Name)
		spec.MaxParallelism = minParallelism(spec.MaxParallelism, ng)
	}
	if len(groups) == total {
		spec.NodeGroups = nil
	}
	return spec
}

// minParallelism is the smaller of mp and a worker group's maxParallelism (0: none yet).
func minParallelism(mp int, ng domain.NodeGroup) int {
	if ng.Spec.Role == domain.RoleWorker {
		if g := ng.Spec.UpdateStrategy.MaxParallelism; g > 0 && (mp == 0 || g < mp) {
			return g
		}
	}
	return mp
}

// startRun creates the Upgrade for a version change. Its name comes from the
// event, so a redelivered event finds it made.
func (s *Saga) startRun(ctx context.Context, ev *domain.Event, seq uint64, tenant string, spec domain.UpgradeSpec) error {
	trigger := strings.ToLower(ev.Object.Kind)
	prefix := "talos-"
	switch {
	case spec.Kubernetes():
		prefix = "kubernetes-"
	case spec.Reimage:
		prefix = "reimage-"
	}
	version := spec.Target()
	name := upgradeName(prefix, version, seq)
	obj := &domain.Object{
		Metadata: domain.ObjectMeta{Name: name, Tenant: tenant,
			Labels:      map[string]string{LabelTrigger: trigger},
			Annotations: map[string]string{AnnotationCause: fmt.Sprintf("%s/%s@%d", ev.Object.Kind, ev.Object.Metadata.Name, seq)}},
		Spec: upgradeJSON(spec),
	}
	res, err := s.createRun(ctx, obj, ev.CorrelationID, "upgrade-trigger-"+name)
	if err != nil {
		return fmt.Errorf("starting an upgrade of tenant %s to %s: %w", tenant, version, err)
	}
	if res != nil && !res.Duplicate {
		s.cfg.Log.Info("upgrade queued by a version change", "tenant", tenant, "upgrade", name, "to", version, "nodeGroups", spec.NodeGroups, "cause", obj.Metadata.Annotations[AnnotationCause])
	}
	return nil
}

// createRun creates the Upgrade obj (its name and tenant in its metadata)
// as the saga, idempotent by msgID. It answers nil when a run of that name
// exists already: a redelivered event or a repeated check made it.
func (s *Saga) createRun(ctx context.Context, obj *domain.Object, correlationID, msgID string) (*eventstore.Result, error) {
	ref := domain.Ref{Kind: domain.UpgradeKind.Kind, Tenant: obj.Metadata.Tenant, Name: obj.Metadata.Name}
	res, err := s.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: Actor,
		CorrelationID: correlationID, Now: s.cfg.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{MsgID: msgID})
	if domain.IsAlreadyExists(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// triggerKubernetes starts a Kubernetes run when a tenant event changed its
// declared kubernetesVersion from the one remembered, and the machines'
// configs carry another (status.kubernetesVersion: a tenant whose configs
// were never applied has nothing to move; the first apply renders the
// declared version). A tenant seen for the first time starts a run only when
// its configs carry another version than the declared one (the saga was not
// running when it changed).
func (s *Saga) triggerKubernetes(ctx context.Context, kv jetstream.KeyValue, ev *domain.Event, seq uint64, tenant *domain.Tenant, groups []domain.NodeGroup, machines []domain.Machine) error {
	if len(machines) == 0 {
		// Nothing runs Kubernetes yet: machines are built on the version
		// declared. Nothing to remember either: the decision below is made
		// on what the machines carry (status), the record only spares a
		// second run for one change.
		return nil
	}
	name := tenant.Metadata.Name
	key := name + "." + kubernetesKey
	desired, carried := tenant.Spec.KubernetesVersion, tenant.Status.KubernetesVersion
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return err
	case string(e.Value()) == desired:
		return nil
	}
	if carried != "" && carried != desired {
		spec := domain.UpgradeSpec{KubernetesVersion: desired}
		for _, ng := range groups {
			spec.MaxParallelism = minParallelism(spec.MaxParallelism, ng)
		}
		if err := s.startRun(ctx, ev, seq, name, spec); err != nil {
			return err
		}
	}
	// Remembered only once the run exists (see trigger).
	_, err = kv.Put(ctx, key, []byte(desired))
	return err
}

// upgradeName is "<prefix><version>-<seq>" with the version made a DNS label.
func upgradeName(prefix, version string, seq uint64) string {
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
	if room := domain.MaxNameLength - len(prefix) - len(suffix); len(v) > room {
		v = strings.Trim(v[:room], "-")
	}
	return prefix + v + suffix
}

func forgetTenantVersions(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, tenant string) error {
	keys, err := eventstore.WholeKeys(ctx, js, VersionsBucket, tenant+".")
	if err != nil {
		return err
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

// decodeParts reads an event's post-image's spec and status (when it has
// them) into their typed views; the metadata is the caller's to copy.
func decodeParts(obj *domain.Object, spec, status any) error {
	if len(obj.Spec) > 0 {
		if err := json.Unmarshal(obj.Spec, spec); err != nil {
			return fmt.Errorf("decoding the spec of %s: %w", obj.Ref(), err)
		}
	}
	if len(obj.Status) > 0 {
		if err := json.Unmarshal(obj.Status, status); err != nil {
			return fmt.Errorf("decoding the status of %s: %w", obj.Ref(), err)
		}
	}
	return nil
}

// tenantHead is the part of a Tenant a node group event needs: whether it is
// being deleted and the Talos version its groups follow. Decoding only it
// skips the tenant's status, which grows with its machines and applies.
type tenantHead struct {
	Metadata struct {
		DeletionTimestamp *time.Time `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		TalosVersion string `json:"talosVersion"`
	} `json:"spec"`
}

// tenantHeadAt is a tenant's head and the read model's sequence of it.
type tenantHeadAt struct {
	seq  uint64
	head tenantHead
}

// tenantHead reads a tenant's head from the read model, decoding it only
// when the tenant changed since the last read.
func (s *Saga) tenantHead(ref domain.Ref) (tenantHead, bool, error) {
	raw, seq, ok := s.cfg.Cache.GetAt(ref)
	s.headsMu.Lock()
	defer s.headsMu.Unlock()
	if !ok {
		delete(s.heads, ref.Name)
		return tenantHead{}, false, nil
	}
	if h, hit := s.heads[ref.Name]; hit && h.seq == seq {
		return h.head, true, nil
	}
	var head tenantHead
	if err := json.Unmarshal(raw, &head); err != nil {
		return tenantHead{}, false, fmt.Errorf("decoding %s: %w", ref, err)
	}
	s.heads[ref.Name] = tenantHeadAt{seq: seq, head: head}
	return head, true, nil
}

// forgetTenantHead drops a deleted tenant's head.
func (s *Saga) forgetTenantHead(name string) {
	s.headsMu.Lock()
	delete(s.heads, name)
	s.headsMu.Unlock()
}

// eventTenant is the tenant of an event, false when the read model no longer
// has it. A tenant event's tenant is the event's post-image (status from the
// read model when the event carries none); a node group event reads only the
// tenant's head from the read model.
func (s *Saga) eventTenant(obj *domain.Object, name string) (*domain.Tenant, bool, error) {
	ref := domain.TenantRef(name)
	if obj.Kind != domain.TenantKind.Kind {
		head, ok, err := s.tenantHead(ref)
		if err != nil || !ok {
			return nil, false, err
		}
		t := &domain.Tenant{}
		t.Metadata.Name = name
		t.Metadata.DeletionTimestamp = head.Metadata.DeletionTimestamp
		t.Spec.TalosVersion = head.Spec.TalosVersion
		return t, true, nil
	}
	if len(obj.Status) == 0 {
		t, ok, err := projections.Get[domain.Tenant](s.cfg.Cache, ref)
		if err != nil || !ok {
			return nil, false, err
		}
		t.APIVersion, t.Kind, t.Metadata = obj.APIVersion, obj.Kind, obj.Metadata
		t.Spec = domain.TenantSpec{}
		return t, true, decodeParts(obj, &t.Spec, &t.Status)
	}
	if _, _, ok := s.cfg.Cache.Identity(ref); !ok {
		return nil, false, nil
	}
	t := &domain.Tenant{APIVersion: obj.APIVersion, Kind: obj.Kind, Metadata: obj.Metadata}
	return t, true, decodeParts(obj, &t.Spec, &t.Status)
}
