package configsync_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/domain"
)

// domain.StatusOwners names the config controller by the actor it signs its
// writes with.
func TestActorIsTheDeclaredStatusWriter(t *testing.T) {
	require.Equal(t, domain.ActorConfigSync, configsync.Actor)
}
