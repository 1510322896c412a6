package talos

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// writeBackParallelism bounds the status writes of one probe in flight at once.
const writeBackParallelism = 8

// writeBack records what a probe saw that matters: each machine's status
// (only those that changed, judged on the read model first so that a probe
// seeing nothing new costs no store round trip), then the tenant's counts,
// Healthy condition and phase. Failures are logged: the answer stands either way.
func (s *HealthService) writeBack(ctx context.Context, tenant string, h domain.TenantHealth) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	now := s.cfg.Now()
	sem := make(chan struct{}, writeBackParallelism)
	var wg sync.WaitGroup
	for _, mh := range h.Machines {
		ref := domain.Ref{Kind: domain.MachineKind.Kind, Tenant: tenant, Name: mh.Name}
		cur, err := getTyped[domain.Machine](s.cfg.Cache, ref)
		if err != nil || cur.Metadata.DeletionTimestamp != nil {
			continue // deleted since the probe began, or going
		}
		if _, changed := machineStatusAfter(cur.Status, mh, now, s.cfg.LastSeenEvery); !changed {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := s.updateStatus(ctx, ref, func(raw json.RawMessage) (any, bool, error) {
				var st domain.MachineStatus
				if err := decodeStatus(raw, &st); err != nil {
					return nil, false, err
				}
				next, changed := machineStatusAfter(st, mh, now, s.cfg.LastSeenEvery)
				return next, changed, nil
			})
			if err != nil {
				s.cfg.Log.Warn("health: writing machine status", "tenant", tenant, "machine", mh.Name, "err", err)
			}
		}()
	}
	wg.Wait()
	s.writeNodeGroups(ctx, tenant, h)

	ref := domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}
	cur, err := getTyped[domain.Tenant](s.cfg.Cache, ref)
	if err != nil || cur.Metadata.DeletionTimestamp != nil {
		return
	}
	if _, changed := tenantStatusAfter(cur.Status, h, now); !changed {
		return
	}
	err = s.updateStatus(ctx, ref, func(raw json.RawMessage) (any, bool, error) {
		var st domain.TenantStatus
		if err := decodeStatus(raw, &st); err != nil {
			return nil, false, err
		}
		next, changed := tenantStatusAfter(st, h, now)
		return next, changed, nil
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
func (s *HealthService) writeNodeGroups(ctx context.Context, tenant string, h domain.TenantHealth) {
	groups, err := listTyped[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind.Kind, tenant)
	if err != nil || len(groups) == 0 {
		return
	}
	machines, err := listTyped[domain.Machine](s.cfg.Cache, domain.MachineKind.Kind, tenant)
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
		ref := domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: g.Metadata.Name}
		err := s.updateStatus(ctx, ref, func(raw json.RawMessage) (any, bool, error) {
			var st domain.NodeGroupStatus
			if err := decodeStatus(raw, &st); err != nil {
				return nil, false, err
			}
			if st.Replicas == want.replicas && st.ReadyReplicas == want.ready {
				return nil, false, nil
			}
			st.Replicas, st.ReadyReplicas = want.replicas, want.ready
			return st, true, nil
		})
		if err != nil {
			s.cfg.Log.Warn("health: writing node group status", "tenant", tenant, "nodegroup", g.Metadata.Name, "err", err)
		}
	}
}

// updateStatus rewrites an object's status through next, on the current
// state, retrying conflicting writers; spec and metadata are never touched.
func (s *HealthService) updateStatus(ctx context.Context, ref domain.Ref, next func(json.RawMessage) (any, bool, error)) error {
	_, err := s.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: s.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil || state.Terminating() {
			return nil, nil
		}
		st, changed, err := next(state.Status)
		if err != nil || !changed {
			return nil, err
		}
		raw, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		return domain.Decide(state, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: HealthActor, Now: s.cfg.Now(),
			Object: &domain.Object{Status: raw}})
	})
	if domain.IsNotFound(err) {
		return nil
	}
	return err
}

func decodeStatus(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}
