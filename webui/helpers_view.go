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

// machineConfigView is what a machine's CONFIG shows: up to date, pending or
// failed, the badge's colours, and the ConfigApplied condition's reason and
// message (how the config was applied, or why it was not).
type machineConfigView struct {
	State, Class    string
	Reason, Message string
	// Hash is the hex SHA-256 of the config the machine holds ("" before its first).
	Hash string
}

func machineConfigOf(m domain.Machine) machineConfigView {
	state, c := m.Status.ConfigState()
	v := machineConfigView{State: state, Hash: m.Metadata.Annotations[domain.AnnotationConfigHash]}
	switch state {
	case domain.ConfigStateUpToDate:
		v.Class = phaseClass("True")
	case domain.ConfigStateFailed:
		v.Class = phaseClass("False")
	default:
		v.Class = phaseClass("Unknown")
	}
	if c != nil {
		v.Reason, v.Message = c.Reason, c.Message
	}
	return v
}

// title is the badge's tooltip: the reason and message.
func (v machineConfigView) title() string {
	switch {
	case v.Reason != "" && v.Message != "":
		return v.Reason + ": " + v.Message
	case v.Reason != "":
		return v.Reason
	}
	return v.Message
}

// shortHash is the first 12 hex digits of a config hash.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
