package projections

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"rezus.evt.tenant._.acme", "rezus.evt.tenant._.acme", true},
		{"rezus.evt.tenant._.acme", "rezus.evt.tenant._.acme2", false},
		{"rezus.evt.tenant._.*", "rezus.evt.tenant._.acme", true},
		{"rezus.evt.tenant._.*", "rezus.evt.tenant._.acme.x", false},
		{"rezus.evt.*.acme.*", "rezus.evt.machine.acme.w-0", true},
		{"rezus.evt.*.acme.*", "rezus.evt.machine.beta.w-0", false},
		{"rezus.evt.>", "rezus.evt.machine.acme.w-0", true},
		{"rezus.evt.>", "rezus.evt", false},
		{"rezus.evt.machine", "rezus.evt.machine.acme.w-0", false},
		{"rezus.evt.machine.acme.w-0.x", "rezus.evt.machine.acme.w-0", false},
		{">", "a", true},
	} {
		require.Equal(t, tc.want, subjectMatches(tc.filter, tc.subject), "%s ~ %s", tc.filter, tc.subject)
	}
}

// A change feed hears only its subjects, gets the newest sequence of a burst
// it has not read, and nothing after stop or the end of its context.
func TestChangesFromTheReadModel(t *testing.T) {
	c := NewCache(nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acme, stopAcme, err := c.Changes(ctx, []string{"rezus.evt.nodegroup.acme.*"})
	require.NoError(t, err)
	all, _, err := c.Changes(ctx, []string{"rezus.evt.>"})
	require.NoError(t, err)
	rec := func(seq uint64, tenant, name string) {
		r := nodeGroupRecord(seq, tenant, name, false)
		r.Subject = "rezus.evt.nodegroup." + tenant + "." + name
		c.apply(r)
	}
	rec(1, "acme", "a")
	rec(2, "beta", "b")
	rec(3, "acme", "c")
	require.Equal(t, uint64(3), <-acme, "the newest of a burst")
	require.Equal(t, uint64(3), <-all)
	rec(4, "beta", "d")
	require.Equal(t, uint64(4), <-all)
	select {
	case seq := <-acme:
		t.Fatalf("acme heard beta's change %d", seq)
	default:
	}
	stopAcme()
	rec(5, "acme", "e")
	require.Equal(t, uint64(5), <-all)
	select {
	case seq := <-acme:
		t.Fatalf("a stopped feed heard %d", seq)
	default:
	}
	cancel()
	require.Eventually(t, func() bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return len(c.subs) == 0
	}, 5e9, 1e6, "feeds end with their context")
}
