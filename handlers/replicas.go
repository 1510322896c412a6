package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// ReplicaViewer says which replicas run on this data and at which storage
// schema levels, and which of them this one is (eventstore.Replicas).
type ReplicaViewer interface {
	View() eventstore.ReplicaView
	// Holder names this replica, as its heartbeat does.
	Holder() string
}

// replicaRoutes serves the replicas' heartbeats. Admin only (rbac.go): the
// list names the hosts, their NATS nodes and releases, which no tenant's
// work needs. /admin/replicas is the route's first name (0.2.0), kept.
func (a *API) replicaRoutes(g *authed) {
	g.GET("/replicas", a.listReplicas)
	g.GET("/admin/replicas", a.listReplicas)
}

// clusterView is what the heartbeats say; without them (tests, a server
// built without heartbeats) this replica alone, at its own level.
func (a *API) clusterView() eventstore.ReplicaView {
	if a.replicas == nil {
		return eventstore.ReplicaView{ClusterLevel: domain.SchemaLevel, WriteLevel: domain.SchemaLevel}
	}
	return a.replicas.View()
}

// listReplicas answers GET /api/v1/replicas: every live replica's release,
// start, last heartbeat, tenant count and schema level, and which one
// answers.
func (a *API) listReplicas(c echo.Context) error {
	v := a.clusterView()
	l := domain.ReplicaList{APIVersion: domain.APIVersion, Kind: domain.ReplicaListKind, SchemaLevel: domain.SchemaLevel,
		ClusterSchemaLevel: v.ClusterLevel, WriteSchemaLevel: v.WriteLevel, Items: make([]domain.Replica, 0, len(v.Replicas)),
		UnknownPeers: v.UnknownPeers}
	if a.replicas != nil {
		l.Self = a.replicas.Holder()
	}
	for _, r := range v.Replicas {
		l.Items = append(l.Items, replicaOf(r))
	}
	return c.JSON(http.StatusOK, l)
}

// replicaOf is a heartbeat as the API shows it. A heartbeat without an ID
// comes from a release before 0.2.0, which does not count its tenants: its
// zero is "not said", not "none".
func replicaOf(r eventstore.Replica) domain.Replica {
	out := domain.Replica{Holder: r.Holder, ID: r.ID, Version: r.Version, StartedAt: r.StartedAt, Seen: r.Seen,
		NATSServer: r.NATSServer, SchemaLevel: r.SchemaLevel}
	if r.ID != "" {
		n := r.Tenants
		out.Tenants = &n
	}
	return out
}
