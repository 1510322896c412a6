package upgrade

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollDelay: a wait looks again an eighth of the time it has waited
// later, never sooner than firstPoll nor later than the configured most.
func TestPollDelay(t *testing.T) {
	for _, tc := range []struct {
		name         string
		waited, most time.Duration
		want         time.Duration
	}{
		{"the first look after the first answer", 0, 2 * time.Second, firstPoll},
		{"an eighth of a short wait is under the floor", time.Second, 2 * time.Second, firstPoll},
		{"an eighth of the wait so far", 4 * time.Second, 2 * time.Second, 500 * time.Millisecond},
		{"a node rebooting for 7 s is seen back within 0.875 s", 7 * time.Second, 2 * time.Second, 875 * time.Millisecond},
		{"a long wait asks every PollInterval", 10 * time.Minute, 2 * time.Second, 2 * time.Second},
		{"a maintenance window: waited since the zero time", time.Duration(1<<63 - 1), 2 * time.Second, 2 * time.Second},
		{"a PollInterval under the floor (tests) is the floor", 0, 5 * time.Millisecond, 5 * time.Millisecond},
		{"and the most", time.Hour, 5 * time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pollDelay(tc.waited, tc.most))
		})
	}
}
