package webui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Bounds of an autoscaled group's decisions on the tenant page: read from
// the group's newest events (its status updates among them, which carry the
// count too), the newest decisions shown.
const (
	autoscalerHistoryEvents  = 100
	autoscalerDecisionsShown = 5
)

// autoscalerActorPrefix starts the actor of every change the
// cluster-autoscaler makes ("system:autoscaler:<tenant>", autoscaling.Actor;
// webui may not import that package, which carries the gRPC service).
const autoscalerActorPrefix = "system:autoscaler:"

// autoscalerDecision is one change the cluster-autoscaler made to a group's
// count. Before is -1 when the event before it is older than what was read.
type autoscalerDecision struct {
	Seq           uint64
	Time          time.Time
	Before, After int
}

// autoscalerDecisionsView is an autoscaled group's newest decisions, newest
// first, or why they cannot be shown.
type autoscalerDecisionsView struct {
	Decisions   []autoscalerDecision
	Unavailable string
}

// autoscalerDecisionsOf reads, for each autoscaled group of ngs, its newest
// decisions: one bounded events query per autoscaled group, none for the
// others. A failure to read them is shown in place of the decisions and
// leaves the table standing.
func (u *UI) autoscalerDecisionsOf(r *http.Request, tenant string, ngs []domain.NodeGroup) map[string]autoscalerDecisionsView {
	var out map[string]autoscalerDecisionsView
	for _, ng := range ngs {
		if ng.Spec.Autoscaling == nil {
			continue
		}
		if out == nil {
			out = map[string]autoscalerDecisionsView{}
		}
		name := ng.Metadata.Name
		var p eventPage
		q := url.Values{"kind": {domain.NodeGroupKind.Kind}, "tenant": {tenant}, "name": {name}, "newest": {strconv.Itoa(autoscalerHistoryEvents)}}
		if err := u.api.call(r, apiRequest{Path: "/events?" + q.Encode()}, &p); err != nil {
			out[name] = autoscalerDecisionsView{Unavailable: "The autoscaler's decisions are not available: " + errorMessage(err)}
			continue
		}
		out[name] = autoscalerDecisionsView{Decisions: autoscalerDecisions(p.Items, autoscalerDecisionsShown)}
	}
	return out
}

// autoscalerDecisions picks from one group's events (oldest first) the
// newest n the cluster-autoscaler made, newest first, each with the count
// of the event before it (whoever made that one) and its own.
func autoscalerDecisions(evs []tenantEvent, n int) []autoscalerDecision {
	var all []autoscalerDecision
	before := -1
	for _, e := range evs {
		if e.Object == nil {
			continue
		}
		var spec struct {
			Count int `json:"count"`
		}
		if json.Unmarshal(e.Object.Spec, &spec) != nil {
			before = -1
			continue
		}
		if isAutoscalerDecision(e) {
			all = append(all, autoscalerDecision{Seq: e.Seq, Time: e.Time, Before: before, After: spec.Count})
		}
		before = spec.Count
	}
	var out []autoscalerDecision
	for i := len(all) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, all[i])
	}
	return out
}

// isAutoscalerDecision says whether e is a change of a group's spec made by
// the cluster-autoscaler: NodeGroupScaled when only the count (and the
// members with it) moved, NodeGroupUpdated otherwise.
func isAutoscalerDecision(e tenantEvent) bool {
	if !strings.HasPrefix(e.Actor, autoscalerActorPrefix) {
		return false
	}
	return e.Type == domain.NodeGroupKind.Kind+"Scaled" || e.Type == domain.NodeGroupKind.Kind+"Updated"
}

// String is "2 → 4", or "→ 4" when the count before is not known.
func (d autoscalerDecision) String() string {
	if d.Before < 0 {
		return "→ " + strconv.Itoa(d.After)
	}
	return strconv.Itoa(d.Before) + " → " + strconv.Itoa(d.After)
}
