package webui

import (
	"net/http"
	"strconv"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/domain"
)

// stateRoutes serve a tenant's Terraform state page (its kept versions, the
// lock, a diff of two versions) and the admins' force-unlock. The API
// decides who may read state (edit) and force-unlock it (admin); the page
// hides the unlock control from others.
func (u *UI) stateRoutes(p *pages) {
	p.GET("/tenants/:tenant/state", u.statePage)
	p.GET("/live/tenants/:tenant/state", u.stateLive)
	p.POST("/tenants/:tenant/state/unlock", u.forceUnlockState)
}

// stateFragments are the live parts of the state page: the lock and the
// kept versions. State writes and locks are no events of the tenant's
// stream, so they show with the next apply event or LiveRefresh.
func (u *UI) stateFragments(tenant string) []fragment {
	read := func(c echo.Context) (statePageView, error) {
		var list stateVersionList
		err := u.api.call(c.Request(), apiRequest{Path: "/tenants/" + tenant + "/state/versions"}, &list)
		if domain.ReasonOf(err) == domain.ReasonNotFound {
			return statePageView{}, &liveEnd{Message: goneMessage("Tenant " + tenant)}
		}
		if err != nil {
			return statePageView{}, err
		}
		if as, err := listOf[domain.Apply](u, c.Request(), "/tenants/"+tenant+"/applies"); err == nil {
			attributeVersions(list.Items, as)
		}
		return statePageView{Tenant: tenant, Lock: list.Lock, Versions: list.Items}, nil
	}
	return []fragment{
		{Event: "state-lock", Render: func(c echo.Context) (templ.Component, error) {
			s, err := read(c)
			if err != nil {
				return nil, err
			}
			return stateLockView(viewerOf(c), s), nil
		}},
		{Event: "state-versions", Render: func(c echo.Context) (templ.Component, error) {
			s, err := read(c)
			if err != nil {
				return nil, err
			}
			return stateVersionTable(s), nil
		}},
	}
}

func (u *UI) stateLive(c echo.Context) error {
	t := c.Param("tenant")
	return u.liveIn(c, t, tenantSubjects(t), u.stateFragments(t)...)
}

// stateLockInfo is OpenTofu's lock description as the API serves it.
type stateLockInfo struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation"`
	Info      string    `json:"Info"`
	Who       string    `json:"Who"`
	Version   string    `json:"Version"`
	Created   time.Time `json:"Created"`
	Path      string    `json:"Path"`
}

// stateLock is the lock holder as GET .../state/versions answers it.
type stateLock struct {
	ApplyID string        `json:"applyID"`
	Info    stateLockInfo `json:"info"`
}

// stateVersion is one kept version as the API lists it.
type stateVersion struct {
	Revision  uint64    `json:"revision"`
	Serial    uint64    `json:"serial"`
	Lineage   string    `json:"lineage"`
	Size      int       `json:"size"`
	MD5       string    `json:"md5"`
	Encrypted bool      `json:"encrypted"`
	Time      time.Time `json:"time"`
	Deleted   bool      `json:"deleted"`
	// Apply is the apply that was running when the version was written (its
	// window from start to end holds the version's time), when one was:
	// the API records no writer per version, only per lock.
	Apply string `json:"-"`
}

type stateVersionList struct {
	Lock  *stateLock     `json:"lock"`
	Items []stateVersion `json:"items"`
}

// stateDiffView is the diff section: two versions, and their resources'
// differences when both could be read.
type stateDiffView struct {
	From, To stateVersion
	// Unreadable says why resources were not compared ("" when they were):
	// "encrypted" under a key the server lacks, or "plain" versions, which
	// only global admins read.
	Unreadable string
	Diff       stateDiff
}

// statePageView is what the state page shows.
type statePageView struct {
	Tenant   string
	Lock     *stateLock
	Versions []stateVersion
	// Diff is set when two versions were chosen (?from=&to=).
	Diff *stateDiffView
	// DiffError is why the chosen diff could not be made.
	DiffError string
	// LockPart and VersionsPart are the live fragments as first rendered,
	// and Seen their digests for the live stream.
	LockPart, VersionsPart templ.Component
	Seen                   string
}

func (u *UI) statePage(c echo.Context) error {
	t := c.Param("tenant")
	var list stateVersionList
	if err := u.api.call(c.Request(), apiRequest{Path: "/tenants/" + t + "/state/versions"}, &list); err != nil {
		return u.fail(c, err)
	}
	if as, err := listOf[domain.Apply](u, c.Request(), "/tenants/"+t+"/applies"); err == nil {
		attributeVersions(list.Items, as)
	}
	view := statePageView{Tenant: t, Lock: list.Lock, Versions: list.Items}
	comps, seen, err := renderFragments(c, u.stateFragments(t))
	if err != nil {
		return u.fail(c, err)
	}
	view.LockPart, view.VersionsPart, view.Seen = comps[0], comps[1], seen
	if from, to := c.QueryParam("from"), c.QueryParam("to"); from != "" || to != "" {
		d, err := u.diffVersions(c, t, list.Items, from, to)
		if err != nil {
			view.DiffError = errorMessage(err)
		} else {
			view.Diff = d
		}
	}
	return render(c, http.StatusOK, StatePage(u, viewerOf(c), view))
}

// attributeVersions names, for each version, the apply whose run held its
// time; the state backend only admits apply credentials, so that is the
// apply that wrote it when no two runs overlapped (the worker runs a
// tenant's applies one at a time).
func attributeVersions(vs []stateVersion, as []domain.Apply) {
	for i := range vs {
		for _, a := range as {
			st, end := a.Status.StartTime, a.Status.EndTime
			if st == nil || vs[i].Time.Before(*st) || (end != nil && vs[i].Time.After(*end)) {
				continue
			}
			vs[i].Apply = a.Metadata.Name
			break
		}
	}
}

// diffVersions reads two kept versions and compares their resources; an
// encrypted version's resources cannot be read (see stateResources).
func (u *UI) diffVersions(c echo.Context, tenant string, vs []stateVersion, from, to string) (*stateDiffView, error) {
	find := func(field, q string) (stateVersion, error) {
		rev, err := strconv.ParseUint(q, 10, 64)
		if err == nil {
			for _, v := range vs {
				if v.Revision == rev {
					if v.Deleted {
						return v, domain.NewBadRequest("revision "+q+" is a deletion: it holds no state",
							domain.Cause{Field: field, Type: domain.CauseInvalid, Message: "a deletion"})
					}
					return v, nil
				}
			}
		}
		return stateVersion{}, domain.NewBadRequest("revision "+q+" is not a kept version of this state",
			domain.Cause{Field: field, Type: domain.CauseInvalid, Message: "not a kept version"})
	}
	f, err := find("from", from)
	if err != nil {
		return nil, err
	}
	t, err := find("to", to)
	if err != nil {
		return nil, err
	}
	d := &stateDiffView{From: f, To: t}
	if (f.Encrypted || t.Encrypted) && u.decryptState == nil {
		d.Unreadable = "encrypted"
		return d, nil
	}
	read := func(v stateVersion) (stateResources, error) {
		var blob []byte
		path := "/tenants/" + tenant + "/state" + query("revision", strconv.FormatUint(v.Revision, 10))
		if err := u.api.call(c.Request(), apiRequest{Path: path}, &blob); err != nil {
			if domain.ReasonOf(err) == domain.ReasonForbidden {
				// A version stored plain holds the tenant's keys: the API
				// hands it to global admins only.
				return stateResources{Plain: true}, nil
			}
			return stateResources{}, err
		}
		if v.Encrypted && u.decryptState != nil {
			plain, err := u.decryptState(c.Request().Context(), tenant, blob)
			if err != nil {
				// Encrypted under another key (a passphrase changed since):
				// compared by serial and size, as without a key.
				u.log.Warn("state page: decrypting a state version", "tenant", tenant, "revision", v.Revision, "err", err)
				return stateResources{Encrypted: true}, nil
			}
			blob = plain
		}
		return readStateResources(blob)
	}
	// Each encrypted version costs its pbkdf2 key derivation (OpenTofu's
	// default 600,000 rounds): the two are read side by side. One after
	// the other, the race-detector build of the browser test missed its
	// 30 s page load on a loaded CI machine.
	var rf, rt stateResources
	g, _ := errgroup.WithContext(c.Request().Context())
	g.Go(func() (err error) { rf, err = read(f); return err })
	g.Go(func() (err error) { rt, err = read(t); return err })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if rf.Encrypted || rt.Encrypted {
		d.Unreadable = "encrypted"
		return d, nil
	}
	if rf.Plain || rt.Plain {
		d.Unreadable = "plain"
		return d, nil
	}
	d.Diff = diffStateResources(rf, rt)
	return d, nil
}

// forceUnlockState releases the state lock through the API (admins only:
// the API refuses others and audits the release).
func (u *UI) forceUnlockState(c echo.Context) error {
	t := c.Param("tenant")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/tenants/" + t + "/state/lock"}, nil); err != nil {
		return u.fail(c, err)
	}
	return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"/state")
}

// selectedVersion is the version a diff form's select starts on: the one
// compared, else the second newest ("from") and the newest ("to").
func selectedVersion(s statePageView, which string, i int) bool {
	rev := s.Versions[i].Revision
	if s.Diff != nil {
		if which == "from" {
			return rev == s.Diff.From.Revision
		}
		return rev == s.Diff.To.Revision
	}
	want := 0
	if which == "from" {
		want = 1
	}
	n := 0
	for j, v := range s.Versions {
		if v.Deleted {
			continue
		}
		if n == want || (j == len(s.Versions)-1 && n < want) {
			return j == i
		}
		n++
	}
	return false
}
