package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
)

// domain.StatusOwners names the saga by the actor it signs its writes with.
func TestActorIsTheDeclaredStatusWriter(t *testing.T) {
	require.Equal(t, domain.ActorUpgradeSaga, upgrade.Actor)
}
