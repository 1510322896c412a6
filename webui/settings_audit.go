package webui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// auditPageSize is how many records a page of the audit log shows.
const auditPageSize = 50

// auditFilters are the audit page's query, as typed.
type auditFilters struct {
	Actor, Kind, Tenant string
	// Since is an RFC 3339 time, a datetime-local value (read as UTC) or a sequence.
	Since string
	// Before, a sequence, pages back: only records up to it are shown.
	Before string
}

// auditFilterFields are the filter fields as the API names them in causes.
var auditFilterFields = []string{"actor", "kind", "tenant", "since", "until"}

// auditView is what the audit page shows.
type auditView struct {
	Filters auditFilters
	// Records are newest first.
	Records []domain.AuditRecord
	// Older is the Before of the next page back, "" on the last.
	Older  string
	Errors formErrors
}

func auditFiltersOf(c echo.Context) auditFilters {
	return auditFilters{Actor: strings.TrimSpace(c.QueryParam("actor")), Kind: strings.TrimSpace(c.QueryParam("kind")),
		Tenant: strings.TrimSpace(c.QueryParam("tenant")), Since: strings.TrimSpace(c.QueryParam("since")),
		Before: strings.TrimSpace(c.QueryParam("before"))}
}

// apiSince turns a datetime-local value (no zone; read as UTC) into RFC 3339;
// anything else goes to the API as typed, which says what is wrong with it.
func apiSince(s string) string {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return s
}

// query is the page's own query string, with before replaced.
func (f auditFilters) query(before string) string {
	return query("actor", f.Actor, "kind", f.Kind, "tenant", f.Tenant, "since", f.Since, "before", before)
}

// auditKinds are the kinds the audit log can be filtered by.
func auditKinds() []string {
	var out []string
	for _, k := range domain.Kinds() {
		out = append(out, k.Kind)
	}
	return append(out, handlers.CredentialKubeconfig, handlers.CredentialTalosconfig, handlers.CredentialMachineConfig)
}

// readAudit reads the newest auditPageSize records of the filters' window
// (one more, to know whether older ones exist) with the API's newest=N.
func (u *UI) readAudit(r *http.Request, f auditFilters) (auditView, error) {
	view := auditView{Filters: f}
	q := url.Values{}
	for k, v := range map[string]string{"actor": f.Actor, "kind": f.Kind, "tenant": f.Tenant, "since": apiSince(f.Since), "until": f.Before} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("newest", strconv.Itoa(auditPageSize+1))
	var page itemList[domain.AuditRecord]
	if err := u.api.call(r, apiRequest{Path: "/audit?" + q.Encode()}, &page); err != nil {
		return view, err
	}
	recs := page.Items
	older := len(recs) > auditPageSize
	if older {
		recs = recs[1:]
	}
	view.Records = make([]domain.AuditRecord, len(recs))
	for i := range recs {
		view.Records[len(recs)-1-i] = recs[i]
	}
	if older && len(recs) > 0 && recs[0].Seq > 1 {
		view.Older = strconv.FormatUint(recs[0].Seq-1, 10)
	}
	return view, nil
}

// auditPage shows the audit log, newest first, filtered; htmx requests (the
// filter form, paging) get the filters and the table only.
func (u *UI) auditPage(c echo.Context) error {
	f := auditFiltersOf(c)
	view, err := u.readAudit(c.Request(), f)
	code := http.StatusOK
	if err != nil {
		if domain.ReasonOf(err) != domain.ReasonBadRequest {
			return u.fail(c, err)
		}
		code = errorCode(err)
		view = auditView{Filters: f, Errors: toFormErrors(err, auditFilterFields...)}
	}
	if isHTMX(c) {
		return render(c, code, auditBody(view))
	}
	return render(c, code, AuditPage(u, viewerOf(c), view))
}

// auditObjectLabel is "Kind tenant/name" of what a record was about.
func auditObjectLabel(r domain.AuditRecord) string {
	name := r.Name
	if r.Tenant != "" && r.Tenant != r.Name {
		name = r.Tenant + "/" + r.Name
	}
	return strings.TrimSpace(r.Kind + " " + name)
}
