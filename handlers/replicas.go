package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// ReplicaViewer says which replicas run on this data and at which storage
// schema levels (eventstore.Replicas).
type ReplicaViewer interface {
	View() eventstore.ReplicaView
}

// replicaList is the body of GET /api/v1/admin/replicas.
type replicaList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// SchemaLevel is the newest level this replica reads and writes.
	SchemaLevel int `json:"schemaLevel"`
	// ClusterSchemaLevel is the lowest level every running replica reads;
	// WriteSchemaLevel what this replica writes (capped by
	// --write-schema-level).
	ClusterSchemaLevel int                  `json:"clusterSchemaLevel"`
	WriteSchemaLevel   int                  `json:"writeSchemaLevel"`
	Items              []eventstore.Replica `json:"items"`
	// UnknownPeers are NATS nodes of the cluster no heartbeat names: a
	// release before heartbeats (0.1.0), counted as level 1.
	UnknownPeers []string `json:"unknownPeers,omitempty"`
}

func (a *API) replicaRoutes(g *authed) {
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

// listReplicas answers GET /api/v1/admin/replicas (admin only: it names
// the hosts): every live replica's release and schema level.
func (a *API) listReplicas(c echo.Context) error {
	v := a.clusterView()
	items := v.Replicas
	if items == nil {
		items = []eventstore.Replica{}
	}
	return c.JSON(http.StatusOK, replicaList{APIVersion: domain.APIVersion, Kind: "ReplicaList", SchemaLevel: domain.SchemaLevel,
		ClusterSchemaLevel: v.ClusterLevel, WriteSchemaLevel: v.WriteLevel, Items: items, UnknownPeers: v.UnknownPeers})
}
