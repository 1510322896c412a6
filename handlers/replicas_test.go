package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// replicaViews answers a fixed view, as eventstore.Replicas would.
type replicaViews eventstore.ReplicaView

func (v replicaViews) View() eventstore.ReplicaView { return eventstore.ReplicaView(v) }

// /version says this replica's schema level and the cluster's; the admin
// route names each replica's release and level and the NATS nodes no
// heartbeat names. (Who may read it: TestEveryRouteEveryRole.)
func TestReplicasAndSchemaLevels(t *testing.T) {
	s := newStack(t)
	view := eventstore.DecideClusterLevel([]eventstore.Replica{
		{Holder: "a-1", Version: "0.2.0", SchemaLevel: 2, NATSServer: "n1"},
		{Holder: "b-1", Version: "0.2.0", SchemaLevel: 2, NATSServer: "n2"},
	}, []string{"n1", "n2", "n3"}, 0)
	api := handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector, Identity: s.identity,
		Replicas: replicaViews(view)})
	defer api.StopWatches()
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		api.Handler().ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return rec
	}

	var v struct{ SchemaLevel, ClusterSchemaLevel int }
	require.NoError(t, json.Unmarshal(get("/version").Body.Bytes(), &v))
	require.Equal(t, domain.SchemaLevel, v.SchemaLevel)
	require.Equal(t, 1, v.ClusterSchemaLevel, "n3 beats not: a 0.1.0 replica")

	var list struct {
		Kind               string
		ClusterSchemaLevel int
		WriteSchemaLevel   int
		Items              []eventstore.Replica
		UnknownPeers       []string
	}
	require.NoError(t, json.Unmarshal(get("/api/v1/admin/replicas").Body.Bytes(), &list))
	require.Equal(t, "ReplicaList", list.Kind)
	require.Equal(t, 1, list.ClusterSchemaLevel)
	require.Equal(t, 1, list.WriteSchemaLevel)
	require.Equal(t, []string{"n3"}, list.UnknownPeers)
	require.Len(t, list.Items, 2)
	require.Equal(t, "0.2.0", list.Items[0].Version)

	// Without heartbeats (one replica, tests): its own level.
	plain := s.do(http.MethodGet, "/version", nil, "Authorization", "")
	require.Contains(t, string(plain.Body), `"clusterSchemaLevel":2`)
}
