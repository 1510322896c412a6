package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// replicaViews answers a fixed view as replica self, as eventstore.Replicas would.
type replicaViews struct {
	view eventstore.ReplicaView
	self string
}

func (v replicaViews) View() eventstore.ReplicaView { return v.view }
func (v replicaViews) Holder() string               { return v.self }

// /version says this replica's schema level and the cluster's; the
// replicas route names each replica's release, level, heartbeat and tenant
// count, which one answers, and the NATS nodes no heartbeat names. (Who may
// read it: TestEveryRouteEveryRole.)
func TestReplicasAndSchemaLevels(t *testing.T) {
	s := newStack(t)
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	view := eventstore.DecideClusterLevel([]eventstore.Replica{
		{Holder: "b-1", ID: "run-b", Version: "0.4.0", SchemaLevel: 2, NATSServer: "n2", StartedAt: start, Seen: start.Add(time.Hour), Tenants: 7},
		{Holder: "a-1", Version: "0.2.0", SchemaLevel: 2, NATSServer: "n1", StartedAt: start, Seen: start.Add(time.Hour)},
	}, []string{"n1", "n2", "n3"}, 0)
	api := handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector, Identity: s.identity,
		Replicas: replicaViews{view: view, self: "b-1"}})
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

	body := get("/api/v1/replicas").Body.String()
	require.JSONEq(t, body, get("/api/v1/admin/replicas").Body.String(), "the first name of the route answers the same")
	var list domain.ReplicaList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Equal(t, domain.ReplicaListKind, list.Kind)
	require.Equal(t, domain.APIVersion, list.APIVersion)
	require.Equal(t, "b-1", list.Self, "the answering replica")
	require.Equal(t, 1, list.ClusterSchemaLevel)
	require.Equal(t, 1, list.WriteSchemaLevel)
	require.Equal(t, []string{"n3"}, list.UnknownPeers)
	seven := 7
	require.Equal(t, []domain.Replica{
		{Holder: "a-1", Version: "0.2.0", SchemaLevel: 2, NATSServer: "n1", StartedAt: start, Seen: start.Add(time.Hour)},
		{Holder: "b-1", ID: "run-b", Version: "0.4.0", SchemaLevel: 2, NATSServer: "n2", StartedAt: start, Seen: start.Add(time.Hour), Tenants: &seven},
	}, list.Items, "by holder; a release before 0.2.0 does not say how many tenants it works")
	require.Contains(t, body, `"seen":"2026-05-01T11:00:00Z"`)
	require.NotContains(t, body, `"tenants":0`)

	// Without heartbeats (one replica, tests): its own level, no items.
	plain := s.do(http.MethodGet, "/version", nil, "Authorization", "")
	require.Contains(t, string(plain.Body), `"clusterSchemaLevel":2`)
	alone := s.do(http.MethodGet, "/api/v1/replicas", nil)
	require.Equal(t, http.StatusOK, alone.Code, string(alone.Body))
	require.Contains(t, string(alone.Body), `"items":[]`)
}
