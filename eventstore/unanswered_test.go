package eventstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// TestAStreamThatDoesNotAnswerIsUnavailable: while JetStream does not
// answer, Bounds (the first call of every watch) is a ServiceUnavailable
// with Retry-After, which a client retries, not an error a watch sends
// as a 500 (the rolling upgrade e2e's watcher got "internal error:
// context deadline exceeded" in CI); a caller that left gets its own
// cancellation back.
func TestAStreamThatDoesNotAnswerIsUnavailable(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	_, _, err := env.Store.Bounds(testCtx(t))
	require.NoError(t, err)
	require.NoError(t, env.Embedded.DisableJetStream())

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, _, err = env.Store.Bounds(ctx)
	de, ok := errors.AsType[*domain.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, domain.ReasonServiceUnavailable, de.Reason, de.Message)
	require.Positive(t, de.RetryAfterSeconds)

	gone, leave := context.WithCancel(t.Context())
	leave()
	_, _, err = env.Store.Bounds(gone)
	require.ErrorIs(t, err, context.Canceled)
	_, isDomain := errors.AsType[*domain.Error](err)
	require.False(t, isDomain, "%v", err)
}
