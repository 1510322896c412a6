package projections

import (
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Get returns the object at ref decoded as T (a kind's type such as
// domain.Machine); ok is false when the read model has no such object.
func Get[T any](c *Cache, ref domain.Ref) (v *T, ok bool, err error) {
	raw, found := c.Get(ref)
	if !found {
		return nil, false, nil
	}
	v = new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, false, fmt.Errorf("decoding %s: %w", ref, err)
	}
	return v, true, nil
}

// List returns the objects of kind that opts select, each decoded once as T,
// in key order. Paging options apply as in Cache.List.
func List[T any](c *Cache, kind *domain.KindInfo, opts ListOptions) ([]T, error) {
	res, err := c.List(kind.Kind, opts)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(res.Items))
	for i, raw := range res.Items {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", kind.Kind, res.Keys[i], err)
		}
	}
	return out, nil
}

// InGroup returns the objects of kind in tenant that name group (Machines by
// spec.nodeGroup), each decoded once as T, in key order.
func InGroup[T any](c *Cache, kind *domain.KindInfo, tenant, group string) ([]T, error) {
	raws := c.InGroup(kind.Kind, tenant, group)
	out := make([]T, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("decoding %s of group %s/%s: %w", kind.Kind, tenant, group, err)
		}
	}
	return out, nil
}

// Lookup is Get of kind's tenant-scoped objects as a function of tenant and
// name, for libraries that must not import the read model (kube/drain's
// node groups); an object that cannot be read counts as absent.
func Lookup[T any](c *Cache, kind *domain.KindInfo) func(tenant, name string) (*T, bool) {
	return func(tenant, name string) (*T, bool) {
		v, ok, err := Get[T](c, domain.ObjectRef(kind, tenant, name))
		return v, err == nil && ok
	}
}
