package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// eventItem is one item of /api/v1/events.
type eventItem struct {
	Seq           uint64         `json:"seq"`
	Subject       string         `json:"subject"`
	Type          string         `json:"type"`
	Action        string         `json:"action"`
	Actor         string         `json:"actor"`
	Time          time.Time      `json:"time"`
	CorrelationID string         `json:"correlationId"`
	Object        *domain.Object `json:"object"`
}

type eventPage struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []eventItem `json:"items"`
}

func (s *stack) eventPage(t *testing.T, query string) eventPage {
	t.Helper()
	r := s.do(http.MethodGet, "/api/v1/events"+query, nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var p eventPage
	require.NoError(t, json.Unmarshal(r.Body, &p), string(r.Body))
	require.Equal(t, "EventList", p.Kind)
	require.Equal(t, domain.APIVersion, p.APIVersion)
	require.NotNil(t, p.Items, "items is [] when empty")
	for _, it := range p.Items {
		require.Equal(t, strconv.FormatUint(it.Seq, 10), it.Object.Metadata.ResourceVersion, "resourceVersion is the sequence")
		ref, ok := domain.ParseSubject(it.Subject)
		require.True(t, ok, it.Subject)
		require.Equal(t, ref, it.Object.Ref())
	}
	return p
}

func eventSeqs(items []eventItem) []uint64 {
	out := []uint64{}
	for _, it := range items {
		out = append(out, it.Seq)
	}
	return out
}

func eventTypes(items []eventItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.Type)
	}
	return out
}

// eventHistory writes one of every event type; the comments are the sequences.
func eventHistory(t *testing.T, s *stack) {
	t.Helper()
	ok := func(r response) {
		t.Helper()
		require.Less(t, r.Code, 300, string(r.Body))
	}
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))                                                   // 2 TenantCreated
	s.mustCreate("/api/v1/tenants", tenantBody("globex", nil))                                                 // 3 TenantCreated
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))                               // 4 NodeGroupCreated
	s.mustCreate("/api/v1/tenants/globex/nodegroups", nodeGroupBody("workers", 1))                             // 5 NodeGroupCreated
	ok(s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"count":3}}`))              // 6 NodeGroupScaled
	ok(s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"metadata":{"finalizers":["x"]}}`)) // 7 NodeGroupUpdated
	cur := s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil).object(t)
	ok(s.do(http.MethodPut, "/api/v1/tenants/acme/nodegroups/workers/status", // 8 NodeGroupStatusUpdated
		fmt.Sprintf(`{"metadata":{"name":"workers","resourceVersion":%q},"status":{"replicas":3}}`, cur.Metadata.ResourceVersion)))
	ok(s.do(http.MethodDelete, "/api/v1/tenants/acme/nodegroups/workers", nil))                             // 9 NodeGroupDeletionRequested
	ok(s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"metadata":{"finalizers":[]}}`)) // 10 NodeGroupDeleted
	ok(s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"env":"prod"}}}`))            // 11 TenantUpdated
	require.Equal(t, uint64(11), s.lastSeq())                                                               // 1 is the ProviderCreated of withProvider
}

func TestEventsReplay(t *testing.T) {
	s := newStack(t).withProvider()
	eventHistory(t, s)
	st, err := s.env.Store.JetStream().Stream(context.Background(), eventstore.StreamName)
	require.NoError(t, err)
	storedAt := func(seq uint64) string {
		msg, err := st.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		return url.QueryEscape(msg.Time.Format(time.RFC3339Nano))
	}

	t.Run("everything, in order, with the event's fields", func(t *testing.T) {
		p := s.eventPage(t, "")
		require.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, eventSeqs(p.Items))
		require.Equal(t, []string{"ProviderCreated", "TenantCreated", "TenantCreated", "NodeGroupCreated", "NodeGroupCreated", "NodeGroupScaled",
			"NodeGroupUpdated", "NodeGroupStatusUpdated", "NodeGroupDeletionRequested", "NodeGroupDeleted", "TenantUpdated"}, eventTypes(p.Items))
		for _, it := range p.Items {
			rec, err := s.env.Store.Get(context.Background(), it.Seq)
			require.NoError(t, err)
			require.Equal(t, rec.Subject, it.Subject)
			require.Equal(t, string(rec.Event.Action), it.Action)
			require.Equal(t, rec.Event.Actor, it.Actor)
			require.NotEmpty(t, it.Actor)
			require.True(t, rec.Event.Time.Equal(it.Time))
			require.Equal(t, rec.Event.CorrelationID, it.CorrelationID)
			require.NotEmpty(t, it.CorrelationID)
		}
		require.Equal(t, "rezus.evt.nodegroup.acme.workers", p.Items[3].Subject)
		require.Equal(t, "rezus.evt.tenant._.acme", p.Items[1].Subject)
		require.Empty(t, p.Metadata.Continue)
	})

	tests := []struct {
		name         string
		query        string
		want         []uint64
		wantContinue string
	}{
		{name: "since 0", query: "?since=0", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "since a sequence", query: "?since=8", want: []uint64{9, 10, 11}},
		{name: "since the last", query: "?since=11", want: []uint64{}},
		{name: "since a time", query: "?since=" + storedAt(5), want: []uint64{5, 6, 7, 8, 9, 10, 11}},
		{name: "until a sequence", query: "?until=3", want: []uint64{1, 2, 3}},
		{name: "between times", query: "?since=" + storedAt(4) + "&until=" + storedAt(6), want: []uint64{4, 5, 6}},
		{name: "an object's whole history", query: "?kind=nodegroups&tenant=acme&name=workers", want: []uint64{4, 6, 7, 8, 9, 10}},
		{name: "kind by Kind", query: "?kind=NodeGroup", want: []uint64{4, 5, 6, 7, 8, 9, 10}},
		{name: "kind by singular", query: "?kind=tenant", want: []uint64{2, 3, 11}},
		{name: "a tenant's events and its own", query: "?tenant=acme", want: []uint64{2, 4, 6, 7, 8, 9, 10, 11}},
		{name: "a tenant by kind", query: "?kind=tenants&tenant=globex", want: []uint64{3}},
		{name: "a tenant by name", query: "?kind=tenants&name=globex", want: []uint64{3}},
		{name: "a name in every tenant", query: "?name=workers", want: []uint64{4, 5, 6, 7, 8, 9, 10}},
		{name: "a name in a tenant", query: "?tenant=globex&name=workers", want: []uint64{5}},
		{name: "a kind in a tenant", query: "?kind=nodegroups&tenant=globex", want: []uint64{5}},
		{name: "no match", query: "?kind=machines", want: []uint64{}},
		{name: "limit", query: "?limit=4", want: []uint64{1, 2, 3, 4}, wantContinue: "4"},
		{name: "next page", query: "?limit=4&continue=4", want: []uint64{5, 6, 7, 8}, wantContinue: "8"},
		{name: "last page", query: "?limit=4&continue=8", want: []uint64{9, 10, 11}},
		{name: "filtered pages", query: "?limit=2&tenant=acme&continue=4", want: []uint64{6, 7}, wantContinue: "7"},
		// newest=N: the newest N matching events, oldest first, never with continue.
		{name: "newest", query: "?newest=3", want: []uint64{9, 10, 11}},
		{name: "newest, exactly all", query: "?newest=11", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "newest, more than there are", query: "?newest=100", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "newest, the most", query: "?newest=10000", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "newest of a tenant", query: "?newest=3&tenant=acme", want: []uint64{9, 10, 11}},
		{name: "newest of a rarely named tenant", query: "?newest=5&tenant=globex", want: []uint64{3, 5}},
		{name: "newest of a kind", query: "?newest=2&kind=tenants", want: []uint64{3, 11}},
		{name: "newest of a kind in a tenant", query: "?newest=2&kind=nodegroups&tenant=acme", want: []uint64{9, 10}},
		{name: "newest of an object", query: "?newest=1&kind=nodegroups&tenant=globex&name=workers", want: []uint64{5}},
		{name: "newest, the older page", query: "?newest=2&kind=nodegroups&tenant=acme&until=8", want: []uint64{7, 8}},
		{name: "newest, the oldest page", query: "?newest=2&kind=nodegroups&tenant=acme&until=5", want: []uint64{4}},
		{name: "newest since", query: "?newest=5&since=9", want: []uint64{10, 11}},
		{name: "newest since and until", query: "?newest=10&since=3&until=6", want: []uint64{4, 5, 6}},
		{name: "newest until a time", query: "?newest=2&until=" + storedAt(6), want: []uint64{5, 6}},
		{name: "newest, none match", query: "?newest=3&kind=machines", want: []uint64{}},
		{name: "newest, not following", query: "?newest=1&follow=false", want: []uint64{11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := s.eventPage(t, tt.query)
			require.Equal(t, tt.want, eventSeqs(p.Items))
			require.Equal(t, tt.wantContinue, p.Metadata.Continue)
		})
	}

	t.Run("the history shows each state", func(t *testing.T) {
		p := s.eventPage(t, "?kind=nodegroups&tenant=acme&name=workers")
		require.Equal(t, []string{"Created", "Updated", "Updated", "Updated", "Updated", "Deleted"}, func() []string {
			var out []string
			for _, it := range p.Items {
				out = append(out, it.Action)
			}
			return out
		}())
		require.Contains(t, string(p.Items[0].Object.Spec), `"count":1`)
		require.Contains(t, string(p.Items[1].Object.Spec), `"count":3`)
		require.Equal(t, []string{"x"}, p.Items[2].Object.Metadata.Finalizers)
		require.Contains(t, string(p.Items[3].Object.Status), `"replicas":3`)
		require.NotNil(t, p.Items[4].Object.Metadata.DeletionTimestamp)
		require.Empty(t, p.Items[5].Object.Metadata.Finalizers, "the last state before it went")
	})

	bad := []struct {
		query, field string
	}{
		{"?since=last-tuesday", "since"},
		{"?since=-1", "since"},
		{"?until=soon", "until"},
		{"?limit=100000", "limit"},
		{"?kind=widgets", "kind"},
		{"?tenant=ACME", "tenant"},
		{"?name=a.b", "name"},
		{"?name=*", "name"},
		{"?kind=providers&tenant=acme", "tenant"},
		{"?kind=tenants&tenant=acme&name=globex", "name"},
		{"?continue=x", "continue"},
		{"?follow=true&until=3", "until"},
		{"?newest=0", "newest"},
		{"?newest=-1", "newest"},
		{"?newest=many", "newest"},
		{"?newest=10001", "newest"},
		{"?newest=3&follow=true", "newest"},
		{"?newest=3&continue=2", "newest"},
		{"?newest=3&limit=5", "newest"},
		{"?newest=3&kind=widgets", "kind"},
	}
	for _, tt := range bad {
		t.Run("bad "+tt.query, func(t *testing.T) {
			r := s.do(http.MethodGet, "/api/v1/events"+tt.query, nil)
			require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonBadRequest, st.Reason)
			require.NotNil(t, st.Details, string(r.Body))
			var fields []string
			for _, c := range st.Details.Causes {
				fields = append(fields, c.Field)
			}
			require.Contains(t, fields, tt.field)
		})
	}

	t.Run("authentication is required", func(t *testing.T) {
		require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/events", nil, "Authorization", "").Code)
	})

	t.Run("a purged sequence is gone", func(t *testing.T) {
		require.NoError(t, st.Purge(context.Background(), jetstream.WithPurgeSequence(4)))
		r := s.do(http.MethodGet, "/api/v1/events?since=1", nil)
		require.Equal(t, http.StatusGone, r.Code, string(r.Body))
		require.Equal(t, domain.ReasonGone, r.status(t).Reason)
		// Right before the oldest left is fine, and so is the start.
		require.Equal(t, []uint64{4, 5}, eventSeqs(s.eventPage(t, "?since=3&limit=2").Items))
		require.Equal(t, []uint64{4, 5}, eventSeqs(s.eventPage(t, "?limit=2").Items))

		w := s.watch("/api/v1/events?follow=true&since=1")
		ev := w.next(t)
		require.Equal(t, "ERROR", ev.Event)
		require.Contains(t, ev.Data, `"code":410`)
	})
}

func TestEventsFollow(t *testing.T) {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants", tenantBody("globex", nil))

	all := s.watch("/api/v1/events?follow=true")
	fromTwo := s.watch("/api/v1/events?follow=true&since=2&kind=tenants")
	acmeGroups := s.watch("/api/v1/events?follow=true&kind=nodegroups&tenant=acme")
	resumed := s.watch("/api/v1/events?follow=true", "Last-Event-ID", "3")

	s.mustCreate("/api/v1/tenants/globex/nodegroups", nodeGroupBody("g", 1))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("w", 1))
	s.do(http.MethodDelete, "/api/v1/tenants/acme/nodegroups/w", nil)

	type want struct {
		seq  string
		typ  string
		name string
	}
	for _, tt := range []struct {
		name string
		w    *watchStream
		want []want
	}{
		{"everything from the start, then new events", all, []want{{"1", "ProviderCreated", "emu"}, {"2", "TenantCreated", "acme"}, {"3", "TenantCreated", "globex"},
			{"4", "NodeGroupCreated", "g"}, {"5", "NodeGroupCreated", "w"}, {"6", "NodeGroupDeleted", "w"}}},
		{"since a sequence, filtered", fromTwo, []want{{"3", "TenantCreated", "globex"}}},
		{"an object's new events", acmeGroups, []want{{"5", "NodeGroupCreated", "w"}, {"6", "NodeGroupDeleted", "w"}}},
		{"resumed after Last-Event-ID", resumed, []want{{"4", "NodeGroupCreated", "g"}, {"5", "NodeGroupCreated", "w"}, {"6", "NodeGroupDeleted", "w"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, want := range tt.want {
				ev := tt.w.next(t)
				require.Equal(t, "EVENT", ev.Event)
				require.Equal(t, want.seq, ev.ID)
				var body struct {
					Type   string    `json:"type"`
					Object eventItem `json:"object"`
				}
				require.NoError(t, json.Unmarshal([]byte(ev.Data), &body), ev.Data)
				require.Equal(t, "EVENT", body.Type)
				require.Equal(t, want.typ, body.Object.Type)
				require.Equal(t, want.name, body.Object.Object.Metadata.Name)
				require.Equal(t, want.seq, body.Object.Object.Metadata.ResourceVersion)
				require.True(t, strings.HasPrefix(body.Object.Subject, domain.SubjectPrefix+"."), body.Object.Subject)
			}
		})
	}

	t.Run("ends when the server stops watches", func(t *testing.T) {
		s.api.StopWatches()
		for _, w := range []*watchStream{all, fromTwo, acmeGroups, resumed} {
			waitEnded(t, w)
		}
	})
}
