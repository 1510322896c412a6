package webui

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// fixedReplicas answers a fixed heartbeat view as replica self, as
// eventstore.Replicas would.
type fixedReplicas struct {
	view eventstore.ReplicaView
	self string
}

func (f fixedReplicas) View() eventstore.ReplicaView { return f.view }
func (f fixedReplicas) Holder() string               { return f.self }

// The replicas section lists each replica's release, ages, tenant count and
// level, marks the one that answered, and is for admins only.
func TestSettingsReplicas(t *testing.T) {
	now := time.Now().UTC()
	view := eventstore.DecideClusterLevel([]eventstore.Replica{
		{Holder: "host-a-11", ID: "run-a", Version: "0.4.0", SchemaLevel: 2, NATSServer: "n1", StartedAt: now.Add(-3 * time.Hour), Seen: now.Add(-2 * time.Minute), Tenants: 5},
		{Holder: "host-b-22", ID: "run-b", Version: "0.4.0", SchemaLevel: 2, NATSServer: "n2", StartedAt: now.Add(-10 * time.Minute), Seen: now, Tenants: 7},
		{Holder: "host-c-33", Version: "0.3.0", SchemaLevel: 2, NATSServer: "n3", StartedAt: now.Add(-50 * time.Hour), Seen: now},
	}, []string{"n1", "n2", "n3", "n4"}, 0)
	s := newUIStack(t, func(d *handlers.Deps) { d.Replicas = fixedReplicas{view: view, self: "host-b-22"} })

	admin := s.signIn("boss", "admin")
	require.Contains(t, admin.get("/ui/settings").Body, `data-section="Replicas"`)
	p := admin.get("/ui/settings/replicas")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, `aria-current="page" data-tab="Replicas"`)
	rows := strings.Split(p.Body, "<tr data-replica=")[1:]
	require.Len(t, rows, 3, p.Body)
	for i, want := range [][]string{
		{`"host-a-11"`, ">0.4.0<", ">3h ago<", ">2m ago<", `data-testid="replica-tenants">5<`, ">n1<", "run run-a"},
		{`"host-b-22"`, `data-testid="replica-self">this replica<`, ">10m ago<", `data-testid="replica-tenants">7<`, ">n2<"},
		{`"host-c-33"`, ">0.3.0<", ">2d ago<", `data-testid="replica-tenants">unknown<`, "no run ID"},
	} {
		for _, w := range want {
			require.Contains(t, rows[i], w, "row %d", i)
		}
	}
	require.Equal(t, 1, strings.Count(p.Body, `data-testid="replica-self"`))
	require.Contains(t, p.Body, `data-testid="replicas-unknown-peers"`)
	require.Contains(t, p.Body, ">n4<")

	viewer := s.signIn("vera", "view")
	require.Equal(t, http.StatusForbidden, viewer.get("/ui/settings/replicas").Code)
	require.NotContains(t, viewer.get("/ui/settings").Body, "/ui/settings/replicas")
}
