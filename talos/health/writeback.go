package health

import (
	"context"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// writeBackParallelism bounds the status writes of one probe in flight at once.
const writeBackParallelism = 8

// writeBack records what a probe saw that matters: each machine's status
// (only those that changed, judged on the read model first so that a probe
// seeing nothing new costs no store round trip), then the tenant's counts,
// Healthy condition and phase. Failures are logged: the answer stands either way.
func (s *Service) writeBack(ctx context.Context, tenant string, h domain.TenantHealth) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	now := s.cfg.Now()
	sem := make(chan struct{}, writeBackParallelism)
	var wg sync.WaitGroup
	for _, mh := range h.Machines {
		ref := domain.ObjectRef(domain.MachineKind, tenant, mh.Name)
		cur, ok, err := projections.Get[domain.Machine](s.cfg.Cache, ref)
		if err != nil || !ok || cur.Metadata.DeletionTimestamp != nil {
			continue // deleted since the probe began, or going
		}
		if _, changed := machineStatusAfter(cur.Status, mh, now, s.cfg.LastSeenEvery); !changed {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := writeStatus(ctx, s, ref, func(st *domain.MachineStatus) (changed bool) {
				*st, changed = machineStatusAfter(*st, mh, now, s.cfg.LastSeenEvery)
				return changed
			})
			if err != nil {
				s.cfg.Log.Warn("health: writing machine status", "tenant", tenant, "machine", mh.Name, "err", err)
			}
		}()
	}
	wg.Wait()
	s.writeNodeGroups(ctx, tenant, h)

	ref := domain.TenantRef(tenant)
	cur, ok, err := projections.Get[domain.Tenant](s.cfg.Cache, ref)
	if err != nil || !ok || cur.Metadata.DeletionTimestamp != nil {
		return
	}
	if _, changed := tenantStatusAfter(cur.Status, h, now); !changed {
		return
	}
	err = writeStatus(ctx, s, ref, func(st *domain.TenantStatus) (changed bool) {
		*st, changed = tenantStatusAfter(*st, h, now)
		return changed
	})
	if err != nil {
		s.cfg.Log.Warn("health: writing tenant status", "tenant", tenant, "err", err)
	}
}

// replicaCounts are a node group's machines and how many of them the probe
// found ready.
type replicaCounts struct{ replicas, ready int }

// writeNodeGroups records each node group's replicas (its machines) and ready
// replicas (those the probe found ready), for the groups whose counts changed.
// Other status fields are left as they are.
func (s *Service) writeNodeGroups(ctx context.Context, tenant string, h domain.TenantHealth) {
	groups, err := projections.List[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil || len(groups) == 0 {
		return
	}
	machines, err := projections.List[domain.Machine](s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return
	}
	ready := make(map[string]bool, len(h.Machines))
	for _, mh := range h.Machines {
		ready[mh.Name] = mh.Ready
	}
	counts := map[string]replicaCounts{}
	for _, m := range machines {
		if m.Metadata.DeletionTimestamp != nil {
			continue
		}
		c := counts[m.Spec.NodeGroup]
		c.replicas++
		if ready[m.Metadata.Name] {
			c.ready++
		}
		counts[m.Spec.NodeGroup] = c
	}
	for _, g := range groups {
		want := counts[g.Metadata.Name]
		if g.Metadata.DeletionTimestamp != nil || (g.Status.Replicas == want.replicas && g.Status.ReadyReplicas == want.ready) {
			continue
		}
		ref := domain.ObjectRef(domain.NodeGroupKind, tenant, g.Metadata.Name)
		err := writeStatus(ctx, s, ref, func(st *domain.NodeGroupStatus) bool {
			if st.Replicas == want.replicas && st.ReadyReplicas == want.ready {
				return false
			}
			st.Replicas, st.ReadyReplicas = want.replicas, want.ready
			return true
		})
		if err != nil {
			s.cfg.Log.Warn("health: writing node group status", "tenant", tenant, "nodegroup", g.Metadata.Name, "err", err)
		}
	}
}

// writeStatus rewrites an object's status through mutate, on the current
// state, retrying conflicting writers; spec and metadata are never touched,
// and an object gone or going is left alone.
func writeStatus[S any](ctx context.Context, s *Service, ref domain.Ref, mutate func(st *S) (changed bool)) error {
	w := eventstore.StatusWriter{Store: s.cfg.Store, Actor: Actor, Now: s.cfg.Now, Hint: s.cfg.Cache, Retries: 5}
	_, err := eventstore.UpdateStatus(ctx, w, ref, func(obj *domain.Object, st *S) (bool, error) {
		if obj.Terminating() {
			return false, nil
		}
		return mutate(st), nil
	})
	if domain.IsNotFound(err) {
		return nil
	}
	return err
}
