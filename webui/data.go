package webui

import (
	"net/http"
	"net/url"
	"sort"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// itemList is the body of a list answer, typed.
type itemList[T any] struct {
	Items []T `json:"items"`
}

// listOf reads a list from the API.
func listOf[T any](u *UI, r *http.Request, path string) ([]T, error) {
	var l itemList[T]
	if err := u.api.call(r, apiRequest{Path: path}, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// getOf reads one object from the API.
func getOf[T any](u *UI, r *http.Request, path string) (*T, error) {
	var out T
	if err := u.api.call(r, apiRequest{Path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// newestFirst orders objects by creation time, newest first, then by name.
func newestFirst[T any](items []T, meta func(*T) *domain.ObjectMeta) {
	sort.SliceStable(items, func(i, j int) bool {
		a, b := meta(&items[i]), meta(&items[j])
		ta, tb := a.CreationTimestamp, b.CreationTimestamp
		if ta != nil && tb != nil && !ta.Equal(*tb) {
			return ta.After(*tb)
		}
		return a.Name > b.Name
	})
}

func applyMeta(a *domain.Apply) *domain.ObjectMeta     { return &a.Metadata }
func upgradeMeta(a *domain.Upgrade) *domain.ObjectMeta { return &a.Metadata }

// recentAudit reads the newest n audit records of the last day, newest first.
func (u *UI) recentAudit(r *http.Request, n int, filters url.Values) ([]eventstore.AuditRecord, error) {
	var l itemList[eventstore.AuditRecord]
	q := url.Values{}
	for k, v := range filters {
		q[k] = v
	}
	if q.Get("since") == "" {
		q.Set("since", u.now().Add(-24*3600e9).UTC().Format("2006-01-02T15:04:05Z"))
	}
	q.Set("limit", "10000")
	if err := u.api.call(r, apiRequest{Path: "/audit?" + q.Encode()}, &l); err != nil {
		return nil, err
	}
	recs := l.Items
	if len(recs) > n {
		recs = recs[len(recs)-n:]
	}
	out := make([]eventstore.AuditRecord, len(recs))
	for i := range recs {
		out[len(recs)-1-i] = recs[i]
	}
	return out, nil
}

// firstN keeps at most n items.
func firstN[T any](items []T, n int) []T {
	if len(items) > n {
		return items[:n]
	}
	return items
}
