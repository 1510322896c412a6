package webui

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Bounds of a machine page's config history: read from the machine's newest
// events, the newest changes shown.
const (
	configHistoryEvents = 300
	configHistoryShown  = 10
)

// configHistoryView is a machine's config history, newest first, or why it
// cannot be shown.
type configHistoryView struct {
	Changes     []domain.ConfigChange
	Unavailable string
}

// configHistory reads the machine's config history from its newest events
// (the same reading as rezusctl describe machine). A failure to read them
// leaves the rest of the page standing.
func (u *UI) configHistory(r *http.Request, tenant, name string) configHistoryView {
	var p eventPage
	q := url.Values{"kind": {domain.MachineKind.Kind}, "tenant": {tenant}, "name": {name}, "newest": {strconv.Itoa(configHistoryEvents)}}
	if err := u.api.call(r, apiRequest{Path: "/events?" + q.Encode()}, &p); err != nil {
		return configHistoryView{Unavailable: "The config history is not available: " + errorMessage(err)}
	}
	h := domain.NewConfigHistory()
	for _, e := range p.Items {
		h.Add(e.Type, e.Actor, e.Time, e.Object)
	}
	all := h.Changes()
	v := configHistoryView{}
	for i := len(all) - 1; i >= 0 && len(v.Changes) < configHistoryShown; i-- {
		v.Changes = append(v.Changes, all[i])
	}
	return v
}
