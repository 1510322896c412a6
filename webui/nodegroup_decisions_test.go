package webui

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// autoscale sets a node group's count as the cluster-autoscaler's
// externalgrpc service does: a spec update recorded as its actor.
func (s *uiStack) autoscale(tenant, name string, count int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref := domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: name}
	res, err := s.env.Store.Update(ctx, ref, eventstore.UpdateOptions{}, func(state *domain.Object) ([]domain.Event, error) {
		var spec map[string]any
		if err := json.Unmarshal(state.Spec, &spec); err != nil {
			return nil, err
		}
		spec["count"] = count
		obj := state.DeepCopy()
		var err error
		if obj.Spec, err = json.Marshal(spec); err != nil {
			return nil, err
		}
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: obj, Actor: "system:autoscaler:" + tenant, Now: time.Now()})
	})
	require.NoError(s.t, err)
	require.NoError(s.t, s.cache.WaitFor(ctx, res.Seq))
}

// The tenant page lists an autoscaled group's decisions from its events:
// the autoscaler's alone, newest first, each counted from the event before
// it, whoever made that one; a group that does not autoscale has none.
func TestNodeGroupAutoscalerDecisions(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	s.create("/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "burst"},
		"spec": map[string]any{"role": "worker", "count": 2, "provider": "emu", "autoscaling": map[string]any{"minCount": 1, "maxCount": 5}}})
	s.autoscale("acme", "burst", 4)
	s.apiCall(http.MethodPatch, "/tenants/acme/nodegroups/burst", map[string]any{"spec": map[string]any{"count": 3}}, nil) // a user's
	s.autoscale("acme", "burst", 1)

	view := s.signIn("vic", "view")
	p := view.hxGetTarget("/ui/tenants/acme", "nodegroup-rows")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	list := regexp.MustCompile(`(?s)data-nodegroup="burst".*?data-testid="autoscaler-decisions">(.*?)</ol>`).FindStringSubmatch(p.Body)
	require.NotNil(t, list, p.Body)
	items := regexp.MustCompile(`(?s)<li data-seq="\d+">\s*(\d+ → \d+)\s*<time datetime="[^"]+Z"`).FindAllStringSubmatch(list[1], -1)
	require.Len(t, items, 2, list[1])
	require.Equal(t, "3 → 1", items[0][1], "the newest first, from the user's 3")
	require.Equal(t, "2 → 4", items[1][1])
	require.Equal(t, 1, strings.Count(p.Body, `data-testid="autoscaler-decisions"`), "the groups that do not autoscale list none")
}

// A decision whose previous event was not read says only what it set.
func TestAutoscalerDecisionsWindowStart(t *testing.T) {
	ev := func(seq uint64, actor string, count int) tenantEvent {
		return tenantEvent{Seq: seq, Type: "NodeGroupScaled", Actor: actor,
			Object: &domain.Object{Spec: json.RawMessage(`{"count":` + strconv.Itoa(count) + `}`)}}
	}
	got := autoscalerDecisions([]tenantEvent{ev(7, "system:autoscaler:acme", 3), ev(8, "system:autoscaler:acme", 4), ev(9, "alice", 2)}, 5)
	require.Equal(t, []string{"3 → 4", "→ 3"}, []string{got[0].String(), got[1].String()})
	require.Len(t, autoscalerDecisions([]tenantEvent{ev(7, "system:autoscaler:acme", 3), ev(8, "system:autoscaler:acme", 4)}, 1), 1)
}
