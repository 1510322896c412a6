package handlers

import (
	"encoding/json"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// eventVisibility returns whether the caller may see a record's object: the
// rule get and list of its kind apply (kinds whose hooks filter visibility,
// e.g. a non-admin sees only its own API tokens), so a replay or a follow
// shows no more than reads do; objects of a tenant need a role on that tenant
// (its labels as they are now), objects of global kinds the global role. A
// replay page may hold fewer items than its limit; its continue token still
// resumes after the last record read. The rule runs on a context of its own
// holding the caller's identity as the guard last checked it: a follow calls
// it from the goroutine reading the stream.
func (a *API) eventVisibility(g *streamGuard) func(*eventstore.Record) bool {
	filtered := map[string]kindHooks{}
	for _, k := range domain.Kinds() {
		if h := a.hooksFor(k); isVisibilityFilter(h) {
			filtered[k.Kind] = h
		}
	}
	return func(rec *eventstore.Record) bool {
		obj := rec.Event.Object
		acc := g.access()
		if obj == nil {
			return domain.RoleRank(acc.Global()) > 0
		}
		switch {
		case obj.Kind == domain.TenantKind.Kind:
			if !g.tenantVisible(obj.Metadata.Name) {
				return false
			}
		case obj.Metadata.Tenant != "":
			if !g.tenantVisible(obj.Metadata.Tenant) {
				return false
			}
		case domain.RoleRank(acc.Global()) == 0 && obj.Kind != domain.APITokenKind.Kind:
			return false // global kinds: the global role (own tokens aside)
		}
		h, ok := filtered[obj.Kind]
		if !ok {
			return true
		}
		own := a.echo.NewContext(nil, nil)
		own.Set(identityKey, g.identity())
		raw, err := json.Marshal(obj)
		return err == nil && h.visible(own, raw)
	}
}

func isVisibilityFilter(h kindHooks) bool {
	_, ok := h.(visibilityFilter)
	return ok
}
