package handlers

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// TestAClosingConnectionIsRetryable: a request caught by its replica's
// shutdown (the NATS connection closing under a lame duck) answers 503
// with Retry-After, which clients retry on another replica, not a 500
// (the rolling upgrade e2e saw one).
func TestAClosingConnectionIsRetryable(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("loading provider/w-00069: %w", nats.ErrConnectionClosed),
		fmt.Errorf("appending: %w", nats.ErrConnectionDraining),
		// A leader read during an election (rolling upgrade e2e: a 500).
		fmt.Errorf("loading provider/w-00147: %w", &eventstore.NoLeaderError{Stream: "REZUS_EVENTS", Waited: time.Second}),
	} {
		de := asDomainError(err)
		require.Equal(t, domain.ReasonServiceUnavailable, de.Reason, "%v", err)
		require.Equal(t, 503, statusCodeOf(err))
		require.Positive(t, de.RetryAfterSeconds)
	}
	require.Equal(t, domain.ReasonInternalError, asDomainError(fmt.Errorf("something else")).Reason)
}
