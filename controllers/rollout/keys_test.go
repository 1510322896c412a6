package rollout

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestMovesRollout: of the events of an Upgrade a rollout wrote, only the
// status writes of a run still under way leave the rollout to its next
// look; its creation, a cancel, its deletion and its end queue it at once.
func TestMovesRollout(t *testing.T) {
	ev := func(kind *domain.KindInfo, typ, phase string) *domain.Event {
		st, _ := json.Marshal(map[string]any{"phase": phase, "current": "cp-0"})
		return &domain.Event{Type: typ, Object: &domain.Object{Kind: kind.Kind, Status: st}}
	}
	for _, tc := range []struct {
		name string
		ev   *domain.Event
		want bool
	}{
		{"a running run's step", ev(domain.UpgradeKind, "UpgradeStatusUpdated", domain.UpgradeRunning), false},
		{"a planned run", ev(domain.UpgradeKind, "UpgradeStatusUpdated", domain.UpgradePending), false},
		{"a run that succeeded", ev(domain.UpgradeKind, "UpgradeStatusUpdated", domain.UpgradeSucceeded), true},
		{"a run that failed", ev(domain.UpgradeKind, "UpgradeStatusUpdated", domain.UpgradeFailed), true},
		{"a run canceled", ev(domain.UpgradeKind, "UpgradeStatusUpdated", domain.UpgradeCanceled), true},
		{"an upgrade written", ev(domain.UpgradeKind, "UpgradeCreated", ""), true},
		{"a cancel requested", ev(domain.UpgradeKind, "UpgradeCancelRequested", domain.UpgradeRunning), true},
		{"an upgrade deleted", ev(domain.UpgradeKind, "UpgradeDeleted", domain.UpgradeRunning), true},
		{"a status that does not decode", &domain.Event{Type: "UpgradeStatusUpdated", Object: &domain.Object{Kind: domain.UpgradeKind.Kind, Status: json.RawMessage(`[`)}}, true},
		{"a config patch's status", ev(domain.ConfigPatchKind, "ConfigPatchStatusUpdated", ""), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, movesRollout(tc.ev))
		})
	}
}
