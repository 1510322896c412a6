package webui

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/rezuscloud/rezuscloud/domain"
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

// recentAudit reads the newest n audit records, newest first.
func (u *UI) recentAudit(r *http.Request, n int, filters url.Values) ([]domain.AuditRecord, error) {
	var l itemList[domain.AuditRecord]
	q := url.Values{}
	for k, v := range filters {
		q[k] = v
	}
	q.Set("newest", strconv.Itoa(n))
	if err := u.api.call(r, apiRequest{Path: "/audit?" + q.Encode()}, &l); err != nil {
		return nil, err
	}
	out := make([]domain.AuditRecord, len(l.Items))
	for i := range l.Items {
		out[len(l.Items)-1-i] = l.Items[i]
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
