package webui

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tenantPhase is the phase to show: Terminating while deletion runs.
func tenantPhase(t domain.Tenant) string {
	if t.Metadata.DeletionTimestamp != nil {
		return "Deleting"
	}
	if t.Status.Phase == "" {
		return "Pending"
	}
	return t.Status.Phase
}

// upgradeProgress is "done/total machines".
func upgradeProgress(up domain.Upgrade) string {
	done := 0
	for _, m := range up.Status.Machines {
		if m.Final() {
			done++
		}
	}
	return fmt.Sprintf("%d/%d", done, len(up.Status.Machines))
}

// configTracked reports whether RezusCloud applies the machine's config
// itself (metal machines, through the Talos API) and so knows whether it is
// current; machines a tofu provider builds get theirs as user data once.
func configTracked(m domain.Machine) bool {
	return m.Metadata.Labels[domain.LabelManagedBy] == domain.ManagedByMetal
}
