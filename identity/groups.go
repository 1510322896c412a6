package identity

import (
	"slices"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// groupIndex holds the group bindings as of a version of the cache's
// GroupBinding kind, so a request reads them without decoding any.
type groupIndex struct {
	mu      sync.Mutex
	loaded  bool
	version uint64
	specs   []domain.GroupBindingSpec
}

// groupBindings returns the live group bindings, rebuilt only when one
// changed since the last look.
func (s *Service) groupBindings() []domain.GroupBindingSpec {
	idx := &s.groupIndex
	v := s.cache.KindVersion(domain.GroupBindingKind.Kind)
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if idx.loaded && idx.version == v {
		return idx.specs
	}
	list, err := projections.List[domain.GroupBinding](s.cache, domain.GroupBindingKind, projections.ListOptions{})
	if err != nil {
		s.cfg.Log.Warn("listing group bindings", "err", err)
		return idx.specs
	}
	specs := make([]domain.GroupBindingSpec, 0, len(list))
	for _, b := range list {
		if b.Metadata.DeletionTimestamp == nil {
			specs = append(specs, b.Spec)
		}
	}
	idx.specs, idx.version, idx.loaded = specs, v, true
	return specs
}

// withGroups adds to id what its identity-provider groups grant through
// group bindings: the higher of the two global roles, and the groups'
// tenant bindings beside the user's own.
func (s *Service) withGroups(id Identity, groups []string) Identity {
	id.Groups = groups
	if len(groups) == 0 {
		return id
	}
	role, bindings := domain.GroupGrant(s.groupBindings(), groups)
	if domain.RoleRank(role) > domain.RoleRank(id.Role) {
		id.Role = role
	}
	if len(bindings) > 0 {
		id.Bindings = append(slices.Clip(id.Bindings), bindings...)
	}
	return id
}
