package projections

import (
	"encoding/json"

	"github.com/rezuscloud/rezuscloud/domain"
)

// ProviderVersions is spec.versions of the Provider named name: nil (any
// version) when it declares none or does not exist. Only that field is
// decoded: a module provider carries up to a megabyte of files, and the
// API and the upgrade saga ask on every version write and run.
func ProviderVersions(c *Cache, name string) *domain.ProviderVersions {
	raw, ok := c.Get(domain.ObjectRef(domain.ProviderKind, "", name))
	if !ok {
		return nil
	}
	var p struct {
		Spec struct {
			Versions *domain.ProviderVersions `json:"versions"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	return p.Spec.Versions
}
