package apply

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecideReplacement: a run resumed after a crash replaces a machine at
// most once — the state written since the replacement began means the new
// machine is there.
func TestDecideReplacement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		began, now int64
		inState    bool
		want       int
	}{
		{"first run", 0, 7, true, replaceNow},
		{"not in the state, never begun", 0, 7, false, replaceGone},
		{"resumed, nothing written since", 7, 7, true, replaceNow},
		{"resumed, the replacement written", 7, 9, true, replaceWritten},
		{"resumed, destroyed but not built", 7, 8, false, replaceDestroyed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, decideReplacement(tc.began, tc.now, tc.inState))
		})
	}
}
