package handlers

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
)

// The Terraform HTTP state backend, as OpenTofu's `http` backend speaks it
// (internal/backend/remote-state/http in OpenTofu v1.10):
//
//	GET    /tfstate/{tenant}            200 with the state, 204 when there is none
//	POST   /tfstate/{tenant}?ID=<lock>  store a new version; Content-MD5 (base64) checked when sent;
//	                                    accepted when unlocked, or locked under ID by these
//	                                    same credentials, else 423
//	DELETE /tfstate/{tenant}?ID=<lock>  delete the current version (history kept), same lock rule
//	LOCK   /tfstate/{tenant}/lock       body: tofu's LockInfo; 200, or 423 with the holder's LockInfo
//	UNLOCK /tfstate/{tenant}/lock       body: LockInfo with the ID; 200, or 409 with the holder's LockInfo
//	                                    (only the credentials that took the lock release it)
//
// POST and DELETE on /lock do the same as LOCK and UNLOCK, for clients set up
// with lock_method = "POST" and unlock_method = "DELETE". The backend takes only
// apply credentials (HTTP basic auth, see identity.Service.IssueStateCredentials):
// users reach state through /api/v1/tenants/{tenant}/state per RBAC. A lock
// belongs to the apply credential that took it: other credentials of the same
// tenant neither write under it nor release it, even with its ID (an admin's
// force-unlock does, audited). Every error is a Status; the 423 and 409 lock
// answers carry the holder's LockInfo fields but its ID (Operation, Who,
// Created, …) beside the Status fields, which is what tofu reads to say who
// holds the lock.
//
// For users (RBAC: edit; force-unlock: admin):
//
//	GET    /api/v1/tenants/{tenant}/state[?revision=N]  the state blob itself (application/json), with
//	       headers Rezus-State-Serial, Rezus-State-Lineage, Rezus-State-Revision, Rezus-State-Encrypted
//	       and Content-MD5; an older kept version with ?revision=
//	GET    /api/v1/tenants/{tenant}/state/versions      the kept versions, newest first, and the lock holder
//	DELETE /api/v1/tenants/{tenant}/state/lock          force-unlock; answers (and audits) the released lock

// stateKind names Terraform state in errors and audit records.
const stateKind = identity.StateKind

// maxLockInfoBytes bounds a LOCK or UNLOCK body (a LockInfo is a few hundred bytes).
const maxLockInfoBytes = 64 << 10

// Response headers describing a state blob.
const (
	headerStateSerial    = "Rezus-State-Serial"
	headerStateLineage   = "Rezus-State-Lineage"
	headerStateRevision  = "Rezus-State-Revision"
	headerStateEncrypted = "Rezus-State-Encrypted"
	headerContentMD5     = "Content-MD5"
)

// lockOwnerKey holds the apply credential that authenticated a backend
// request, as an eventstore.LockOwner.
const lockOwnerKey = "rezus.tfstate.owner"

func (a *API) stateRoutes(g *authed) {
	e := a.echo
	e.GET("/tfstate/:tenant", a.backendGet, a.stateAuth)
	e.POST("/tfstate/:tenant", a.backendPut, a.stateAuth)
	e.DELETE("/tfstate/:tenant", a.backendDelete, a.stateAuth)
	for _, m := range []string{"LOCK", http.MethodPost} {
		e.Add(m, "/tfstate/:tenant/lock", a.backendLock, a.stateAuth)
	}
	for _, m := range []string{"UNLOCK", http.MethodDelete} {
		e.Add(m, "/tfstate/:tenant/lock", a.backendUnlock, a.stateAuth)
	}

	g.GET("/tenants/:tenant/state", a.stateCurrent)
	g.GET("/tenants/:tenant/state/versions", a.stateVersions)
	g.DELETE("/tenants/:tenant/state/lock", a.stateForceUnlock)
}

// stateAuth admits only apply credentials for the tenant in the path.
func (a *API) stateAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.state == nil || a.identity == nil {
			return &domain.Error{Reason: domain.ReasonServiceUnavailable,
				Message: "this server keeps no terraform state (no state store or identity service)"}
		}
		tenant := c.Param("tenant")
		if changes(c.Request().Method) {
			// Writes, locks and unlocks are audited; tofu's reads are not.
			c.Set(auditTargetKey, auditTarget{kind: stateKind, tenant: tenant, name: tenant})
		}
		user, pass, ok := c.Request().BasicAuth()
		if !ok {
			c.Response().Header().Set("WWW-Authenticate", `Basic realm="rezuscloud-tfstate"`)
			return domain.NewUnauthorized("the state backend takes apply credentials (HTTP basic auth) only; " +
				"users read state through /api/v1/tenants/" + tenant + "/state")
		}
		cred, err := a.identity.VerifyStateCredentials(c.Request().Context(), tenant, user, pass)
		if err != nil {
			if domain.ReasonOf(err) == domain.ReasonUnauthorized {
				c.Response().Header().Set("WWW-Authenticate", `Basic realm="rezuscloud-tfstate"`)
			}
			return err
		}
		c.Set(identityKey, identity.Identity{Name: "apply:" + cred.ApplyID, AuthMethod: identity.AuthStateCredentials})
		c.Set(lockOwnerKey, eventstore.LockOwner{ApplyID: cred.ApplyID, Credential: cred.ID})
		return next(c)
	}
}

func (a *API) backendGet(c echo.Context) error {
	st, err := a.state.Get(c.Request().Context(), c.Param("tenant"))
	if errors.Is(err, eventstore.ErrStateNotFound) {
		return c.NoContent(http.StatusNoContent)
	}
	if err != nil {
		return err
	}
	return writeState(c, st)
}

// writeState sends a state blob with the headers that describe it.
func writeState(c echo.Context, st *eventstore.State) error {
	h := c.Response().Header()
	h.Set(headerStateSerial, strconv.FormatUint(st.Version.Serial, 10))
	h.Set(headerStateLineage, st.Version.Lineage)
	h.Set(headerStateRevision, strconv.FormatUint(st.Version.Revision, 10))
	h.Set(headerStateEncrypted, strconv.FormatBool(st.Version.Encrypted))
	sum := md5.Sum(st.Data)
	h.Set(headerContentMD5, base64.StdEncoding.EncodeToString(sum[:]))
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, st.Data)
}

func (a *API) backendPut(c echo.Context) error {
	tenant := c.Param("tenant")
	body, err := readLimited(c, eventstore.MaxStateSize, "a terraform state")
	if err != nil {
		return err
	}
	if err := checkContentMD5(c.Request().Header.Get(headerContentMD5), body); err != nil {
		return err
	}
	if a.cfg.RequireEncryptedState {
		_, _, encrypted, err := eventstore.InspectState(body)
		if err != nil {
			return err
		}
		if !encrypted {
			return domain.NewBadRequest("this server stores only encrypted terraform state: run tofu with TF_ENCRYPTION")
		}
	}
	v, err := a.state.Put(c.Request().Context(), tenant, c.QueryParam("ID"), lockOwner(c), body)
	if err != nil {
		return a.lockAnswer(c, err, http.StatusLocked)
	}
	return c.JSON(http.StatusOK, v)
}

func (a *API) backendDelete(c echo.Context) error {
	if err := a.state.Delete(c.Request().Context(), c.Param("tenant"), c.QueryParam("ID"), lockOwner(c)); err != nil {
		return a.lockAnswer(c, err, http.StatusLocked)
	}
	return c.NoContent(http.StatusOK)
}

func (a *API) backendLock(c echo.Context) error {
	info, err := readLockInfo(c)
	if err != nil {
		return err
	}
	held, err := a.state.Lock(c.Request().Context(), c.Param("tenant"), info, lockOwner(c))
	if err != nil {
		return a.lockAnswer(c, err, http.StatusLocked)
	}
	return c.JSON(http.StatusOK, held.Info)
}

func (a *API) backendUnlock(c echo.Context) error {
	info, err := readLockInfo(c)
	if err != nil {
		return err
	}
	if err := a.state.Unlock(c.Request().Context(), c.Param("tenant"), info.ID, lockOwner(c)); err != nil {
		return a.lockAnswer(c, err, http.StatusConflict)
	}
	return c.NoContent(http.StatusOK)
}

// lockOwner is the apply credential that authenticated a backend request.
func lockOwner(c echo.Context) eventstore.LockOwner {
	owner, _ := c.Get(lockOwnerKey).(eventstore.LockOwner)
	return owner
}

// lockedStatus is a Status that also is the holder's LockInfo without its
// ID, so tofu can say who holds the lock and API clients still get a Status.
// The ID is left out: it is not needed to wait for the lock, and an admin
// force-unlocks without it.
type lockedStatus struct {
	domain.Status
	Operation string    `json:"Operation"`
	Info      string    `json:"Info"`
	Who       string    `json:"Who"`
	Version   string    `json:"Version"`
	Created   time.Time `json:"Created"`
	Path      string    `json:"Path"`
	ApplyID   string    `json:"applyID,omitempty"`
}

// lockAnswer sends err; a lock held by someone else goes out with code and
// the holder's LockInfo, but its ID.
func (a *API) lockAnswer(c echo.Context, err error, code int) error {
	var le *eventstore.LockedError
	if !errors.As(err, &le) {
		return err
	}
	h := le.Holder
	st := domain.StatusOf(domain.NewConflict(stateKind, le.Tenant, lockMessage(h)))
	st.Code = code
	return c.JSON(code, lockedStatus{Status: st, Operation: h.Info.Operation, Info: h.Info.Info, Who: h.Info.Who,
		Version: h.Info.Version, Created: h.Info.Created, Path: h.Info.Path, ApplyID: h.ApplyID})
}

// lockMessage says who holds a lock, without its ID, and how to free it.
func lockMessage(h eventstore.StateLock) string {
	msg := "the state is locked"
	if h.ApplyID != "" {
		msg += " by apply " + h.ApplyID
	}
	if h.Info.Operation != "" || h.Info.Who != "" {
		msg += fmt.Sprintf(" (%s by %s since %s)", h.Info.Operation, h.Info.Who, h.Info.Created.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return msg + "; only the credentials that took the lock write under it or release it (an admin can force-unlock it)"
}

// describeLock names a lock, its apply and tofu's account of it.
func describeLock(h eventstore.StateLock) string {
	msg := "lock " + h.Info.ID
	if h.ApplyID != "" {
		msg += " of apply " + h.ApplyID
	}
	if h.Info.Operation != "" || h.Info.Who != "" {
		msg += fmt.Sprintf(" (%s by %s since %s)", h.Info.Operation, h.Info.Who, h.Info.Created.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return msg
}

func readLockInfo(c echo.Context) (eventstore.LockInfo, error) {
	body, err := readLimited(c, maxLockInfoBytes, "a lock info")
	if err != nil {
		return eventstore.LockInfo{}, err
	}
	var info eventstore.LockInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return eventstore.LockInfo{}, domain.NewBadRequest("the body must be tofu's lock info JSON: " + err.Error())
	}
	if info.ID == "" {
		return eventstore.LockInfo{}, domain.NewBadRequest("the lock info has no ID",
			domain.Cause{Field: "ID", Type: domain.CauseRequired, Message: "required"})
	}
	return info, nil
}

// readLimited reads a request body of at most limit bytes; longer ones are
// RequestEntityTooLarge.
func readLimited(c echo.Context, limit int64, what string) ([]byte, error) {
	req := c.Request()
	tooLarge := &domain.Error{Reason: domain.ReasonRequestEntityTooLarge,
		Message: fmt.Sprintf("%s may be at most %d bytes", what, limit)}
	if req.ContentLength > limit {
		return nil, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return nil, domain.NewBadRequest("reading the request body: " + err.Error())
	}
	if int64(len(body)) > limit {
		return nil, tooLarge
	}
	return body, nil
}

// checkContentMD5 verifies a Content-MD5 header (base64 of the body's MD5), when sent.
func checkContentMD5(header string, body []byte) error {
	if header == "" {
		return nil
	}
	want, err := base64.StdEncoding.DecodeString(header)
	if err != nil || len(want) != md5.Size {
		return domain.NewBadRequest("the Content-MD5 header must be the base64 of a 16-byte MD5 digest",
			domain.Cause{Field: headerContentMD5, Type: domain.CauseInvalid, Message: "not a base64 MD5 digest"})
	}
	got := md5.Sum(body)
	if !bytes.Equal(want, got[:]) {
		return domain.NewBadRequest("the body does not match its Content-MD5 header: it was damaged on the way",
			domain.Cause{Field: headerContentMD5, Type: domain.CauseInvalid, Message: "does not match the body"})
	}
	return nil
}

// stateTenant reads and checks the tenant of a user state route.
func (a *API) stateTenant(c echo.Context) (string, error) {
	if a.state == nil {
		return "", &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "this server keeps no terraform state"}
	}
	tenant := c.Param("tenant")
	if causes := domain.ValidateName(tenant, "metadata.tenant"); causes != nil {
		return "", domain.NewBadRequest("invalid name in the URL", causes...)
	}
	return tenant, nil
}

// stateCurrent serves GET /api/v1/tenants/{tenant}/state: the current blob,
// or the kept version ?revision=N. Reading state is audited: it holds secrets.
func (a *API) stateCurrent(c echo.Context) error {
	tenant, err := a.stateTenant(c)
	if err != nil {
		return err
	}
	c.Set(auditTargetKey, auditTarget{kind: stateKind, tenant: tenant, name: tenant})
	ctx := c.Request().Context()
	var st *eventstore.State
	if q := c.QueryParam("revision"); q != "" {
		rev, perr := strconv.ParseUint(q, 10, 64)
		if perr != nil || rev == 0 {
			return domain.NewBadRequest("revision must be a positive integer",
				domain.Cause{Field: "revision", Type: domain.CauseInvalid, Message: "must be a positive integer"})
		}
		st, err = a.state.GetRevision(ctx, tenant, rev)
	} else {
		st, err = a.state.Get(ctx, tenant)
	}
	if errors.Is(err, eventstore.ErrStateNotFound) {
		what := "terraform state of tenant " + tenant
		if q := c.QueryParam("revision"); q != "" {
			what += " at revision " + q + " (not kept, or another tenant's)"
		}
		return &domain.Error{Reason: domain.ReasonNotFound, Kind: stateKind, Name: tenant, Message: what + " not found"}
	}
	if err != nil {
		return err
	}
	// The state holds the machine configs with the tenant's keys. Encrypted
	// (every state since issue 13), it is ciphertext under a key only the
	// server holds; a plain one (kept from before) is for global admins.
	if accessOf(c).Global() != domain.RoleAdmin {
		if _, _, encrypted, ierr := eventstore.InspectState(st.Data); ierr != nil || !encrypted {
			return domain.NewForbidden(stateKind, tenant, "this state version is not encrypted and holds the tenant's keys: only global admins read it")
		}
	}
	return writeState(c, st)
}

// stateLockView is a held lock as the API shows it.
type stateLockView struct {
	ApplyID string              `json:"applyID,omitempty"`
	Info    eventstore.LockInfo `json:"info"`
}

type stateVersionList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Tenant     string `json:"tenant"`
	// Lock is the current holder of the state lock, if any.
	Lock  *stateLockView            `json:"lock,omitempty"`
	Items []eventstore.StateVersion `json:"items"`
}

// stateVersions serves GET /api/v1/tenants/{tenant}/state/versions.
func (a *API) stateVersions(c echo.Context) error {
	tenant, err := a.stateTenant(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	items, err := a.state.Versions(ctx, tenant)
	if err != nil {
		return err
	}
	out := stateVersionList{APIVersion: domain.APIVersion, Kind: "TerraformStateVersionList", Tenant: tenant, Items: items}
	if out.Items == nil {
		out.Items = []eventstore.StateVersion{}
	}
	applyID, info, ok, err := a.state.LockHolder(ctx, tenant)
	if err != nil {
		return err
	}
	if ok {
		out.Lock = &stateLockView{ApplyID: applyID, Info: info}
	}
	return c.JSON(http.StatusOK, out)
}

type stateUnlocked struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Tenant     string `json:"tenant"`
	// Released is the lock that was held.
	Released stateLockView `json:"released"`
}

// stateForceUnlock serves DELETE /api/v1/tenants/{tenant}/state/lock: it
// releases the lock whoever holds it. The audit record names the released
// lock and the apply that held it.
func (a *API) stateForceUnlock(c echo.Context) error {
	tenant, err := a.stateTenant(c)
	if err != nil {
		return err
	}
	t := auditTarget{kind: stateKind + "Lock", tenant: tenant, name: tenant}
	c.Set(auditTargetKey, t)
	prev, ok, err := a.state.ForceUnlock(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	if !ok {
		return &domain.Error{Reason: domain.ReasonNotFound, Kind: stateKind + "Lock", Name: tenant,
			Message: "the terraform state of tenant " + tenant + " is not locked"}
	}
	t.detail = "released " + describeLock(prev)
	c.Set(auditTargetKey, t)
	a.log.Info("terraform state force-unlocked", "tenant", tenant, "by", identityOf(c).Name, "lock", prev.Info.ID,
		"apply", prev.ApplyID, "who", prev.Info.Who, "operation", prev.Info.Operation, "created", prev.Info.Created)
	return c.JSON(http.StatusOK, stateUnlocked{APIVersion: domain.APIVersion, Kind: "TerraformStateLockRelease", Tenant: tenant,
		Released: stateLockView{ApplyID: prev.ApplyID, Info: prev.Info}})
}
