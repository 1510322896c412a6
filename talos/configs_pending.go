package talos

import (
	"context"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// ConfigProgress is how far a tenant's machines are in taking their
// rendered configs: the ones that do not hold theirs yet, and of those the
// ones whose apply failed since a time (with the ConfigApplied message).
type ConfigProgress struct {
	Machines int
	Pending  []string
	Failed   map[string]string
}

// ConfigProgress renders every machine's config from the read model as the
// config controller does and compares it with the config-hash the machine
// is recorded as holding (a failure counts when its condition changed at or
// after since): a fleet rollout of a config patch is done on a
// tenant when none is pending. Machines being deleted are left out.
func (s *Service) ConfigProgress(ctx context.Context, tenant string, since time.Time) (ConfigProgress, error) {
	desired, err := s.Desired(ctx, tenant)
	if err != nil {
		return ConfigProgress{}, err
	}
	var p ConfigProgress
	for _, m := range desired.Machines() {
		if m.Metadata.DeletionTimestamp != nil {
			continue
		}
		p.Machines++
		cfg, err := desired.Config(&m, "")
		if err != nil {
			// A config that does not render (a patch machinery refuses) will
			// not be taken: it counts as failed at once.
			p.Pending = append(p.Pending, m.Metadata.Name)
			if p.Failed == nil {
				p.Failed = map[string]string{}
			}
			p.Failed[m.Metadata.Name] = "rendering its config: " + err.Error()
			continue
		}
		if m.Status.ConfigUpToDate && m.Metadata.Annotations[domain.AnnotationConfigHash] == ConfigHash(cfg) {
			continue
		}
		p.Pending = append(p.Pending, m.Metadata.Name)
		if state, c := m.Status.ConfigState(); state == domain.ConfigStateFailed && c != nil && !c.LastTransitionTime.Before(since.Truncate(time.Second)) {
			if p.Failed == nil {
				p.Failed = map[string]string{}
			}
			p.Failed[m.Metadata.Name] = c.Message
		}
	}
	return p, nil
}
