package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
)

func (a *API) requireIdentity() error {
	if a.identity == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "users and tokens are not enabled on this server"}
	}
	return nil
}

// takePassword removes the write-only spec.password from a spec or patch object.
func takePassword(spec map[string]any) (string, bool, error) {
	v, ok := spec["password"]
	if !ok {
		return "", false, nil
	}
	delete(spec, "password")
	pw, isString := v.(string)
	if !isString {
		return "", false, domain.NewBadRequest("spec.password must be a string",
			domain.Cause{Field: "spec.password", Type: domain.CauseTypeInvalid, Message: "must be string"})
	}
	if causes := domain.ValidatePassword(pw, "spec.password"); causes != nil {
		return "", false, domain.NewInvalid(domain.UserKind.Kind, "", causes)
	}
	return pw, true, nil
}

type userHooks struct{ a *API }

// setPasswordAfter sets the password once the write succeeded and, unless
// the user was just created, ends the user's sessions (but the caller's own)
// and API tokens: a password set through the user object is a reset.
func (h *userHooks) setPasswordAfter(c echo.Context, op domain.Op, user, pw string) afterWrite {
	keep := ownSession(c, user)
	return func(ctx context.Context, res eventstore.Result) (map[string]any, error) {
		if err := h.a.identity.SetPassword(ctx, user, pw); err != nil || op == domain.OpCreate {
			return nil, err
		}
		if err := h.a.identity.EndSessions(ctx, user, keep); err != nil {
			return nil, err
		}
		return nil, h.a.endTokens(ctx, c, user)
	}
}

// endTokens revokes user's API tokens after a password change, and has the
// answer wait until the read model no longer lists them.
func (a *API) endTokens(ctx context.Context, c echo.Context, user string) error {
	if err := a.identity.RevokeTokens(ctx, user, identityOf(c).Name, correlationID(c)); err != nil {
		return err
	}
	syncCtx, cancel := context.WithTimeout(ctx, a.cfg.ReadAfterWriteTimeout)
	defer cancel()
	_ = a.cache.Sync(syncCtx)
	return nil
}

// ownSession is the caller's session if the caller is user: the one session a
// password change keeps.
func ownSession(c echo.Context, user string) string {
	if me := identityOf(c); me.Name == user {
		return me.SessionID
	}
	return ""
}

func (h *userHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	if err := h.a.requireIdentity(); err != nil {
		return nil, err
	}
	if op == domain.OpDelete {
		actor, corr := identityOf(c).Name, correlationID(c)
		return func(ctx context.Context, res eventstore.Result) (map[string]any, error) {
			// Its sessions, password and tokens go with the user: a user
			// created again under the name starts with none of them.
			if err := h.a.identity.RevokeUser(ctx, ref.Name, actor, corr); err != nil {
				return nil, err
			}
			// The answer follows the tokens' deletions too, as it follows
			// the user's: a read after it does not find them.
			syncCtx, cancel := context.WithTimeout(ctx, h.a.cfg.ReadAfterWriteTimeout)
			defer cancel()
			_ = h.a.cache.Sync(syncCtx)
			return nil, nil
		}, nil
	}
	if op != domain.OpCreate && op != domain.OpUpdate || len(obj.Spec) == 0 {
		return nil, nil
	}
	var spec map[string]any
	if err := json.Unmarshal(obj.Spec, &spec); err != nil || spec == nil {
		return nil, nil // the normaliser reports it with the field
	}
	pw, ok, err := takePassword(spec)
	if err != nil || !ok {
		return nil, err
	}
	obj.Spec, _ = json.Marshal(spec)
	name := ref.Name
	if name == "" {
		name = obj.Metadata.Name
	}
	return h.setPasswordAfter(c, op, name, pw), nil
}

func (h *userHooks) admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	if err := h.a.requireIdentity(); err != nil {
		return nil, err
	}
	spec, _ := patch["spec"].(map[string]any)
	if spec == nil {
		return nil, nil
	}
	pw, ok, err := takePassword(spec)
	if err != nil || !ok {
		return nil, err
	}
	return h.setPasswordAfter(c, domain.OpUpdate, ref.Name, pw), nil
}

func (h *userHooks) visible(echo.Context, []byte) bool { return true }

// accountRoutes registers login, logout, whoami and password changes.
func (a *API) accountRoutes(g *authed) {
	a.echo.POST("/api/v1/auth/login", a.login)
	a.ssoRoutes()
	g.POST("/auth/logout", a.logout)
	g.GET("/auth/whoami", a.whoami)
	g.PUT("/users/:name/password", a.setPassword)
}

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// login checks a password and answers a session token, also set as an HttpOnly cookie.
func (a *API) login(c echo.Context) error {
	if err := a.requireIdentity(); err != nil {
		return err
	}
	body, err := a.readBody(c, "application/json")
	if err != nil {
		return err
	}
	var req loginRequest
	if causes := domain.DecodeStrict(body, &req, ""); causes != nil {
		return domain.NewBadRequest("the login request is not valid", causes...)
	}
	if req.Username == "" || req.Password == "" {
		return domain.NewBadRequest("username and password are required",
			domain.Cause{Field: "username", Type: domain.CauseRequired, Message: "required"},
			domain.Cause{Field: "password", Type: domain.CauseRequired, Message: "required"})
	}
	tok, exp, id, err := a.identity.Login(c.Request().Context(), req.Username, req.Password, c.RealIP())
	if err != nil {
		return err
	}
	c.Set(identityKey, id)
	c.SetCookie(&http.Cookie{Name: identity.SessionCookie, Value: tok, Path: "/", Expires: exp, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: a.identity.SecureCookies()})
	return c.JSON(http.StatusOK, map[string]any{"token": tok, "expiresAt": exp.UTC().Format(time.RFC3339), "user": id.Name, "role": id.Role})
}

// logout ends the caller's session and clears the cookie.
func (a *API) logout(c echo.Context) error {
	if a.identity != nil {
		if err := a.identity.Logout(c.Request().Context(), c.Request()); err != nil {
			return err
		}
	}
	c.SetCookie(&http.Cookie{Name: identity.SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	return c.NoContent(http.StatusNoContent)
}

func (a *API) whoami(c echo.Context) error {
	id := identityOf(c)
	out := map[string]any{"user": id.Name, "role": id.Role, "authMethod": id.AuthMethod}
	if len(id.Groups) > 0 {
		out["groups"] = id.Groups
	}
	return c.JSON(http.StatusOK, out)
}

type passwordRequest struct {
	Password        string `json:"password"`
	CurrentPassword string `json:"currentPassword,omitempty"`
	// KeepAPITokens keeps the user's API tokens working; by default a
	// password change ends them with the other sessions (issue 27).
	KeepAPITokens bool `json:"keepAPITokens,omitempty"`
}

// setPassword changes a password: one's own with the current password, or
// anyone's as an admin.
func (a *API) setPassword(c echo.Context) error {
	if err := a.requireIdentity(); err != nil {
		return err
	}
	name := c.Param("name")
	if causes := domain.ValidateName(name, "metadata.name"); causes != nil {
		return domain.NewBadRequest("invalid name in the URL", causes...)
	}
	body, err := a.readBody(c, "application/json")
	if err != nil {
		return err
	}
	var req passwordRequest
	if causes := domain.DecodeStrict(body, &req, ""); causes != nil {
		return domain.NewBadRequest("the password request is not valid", causes...)
	}
	me := identityOf(c)
	ctx := c.Request().Context()
	if _, ok := a.cache.GetObject(domain.Ref{Kind: domain.UserKind.Kind, Name: name}); !ok {
		if me.Role != domain.RoleAdmin {
			return domain.NewForbidden(domain.UserKind.Kind, name, "you may change only your own password")
		}
		return domain.NewNotFound(domain.UserKind.Kind, name)
	}
	if me.Role != domain.RoleAdmin {
		if me.Name != name {
			return domain.NewForbidden(domain.UserKind.Kind, name, "you may change only your own password")
		}
		// Through the login limiter, counted with logins: a session or a
		// token must not guess the password behind it without limit.
		if err := a.identity.CheckCurrentPassword(ctx, name, req.CurrentPassword, c.RealIP(), "currentPassword"); err != nil {
			return err
		}
	}
	if causes := domain.ValidatePassword(req.Password, "password"); causes != nil {
		return domain.NewInvalid(domain.UserKind.Kind, name, causes)
	}
	if err := a.identity.SetPassword(ctx, name, req.Password); err != nil {
		return err
	}
	// The user's other sessions end; one's own change keeps the session making it.
	if err := a.identity.EndSessions(ctx, name, ownSession(c, name)); err != nil {
		return err
	}
	if !req.KeepAPITokens {
		if err := a.endTokens(ctx, c, name); err != nil {
			return err
		}
	}
	return c.NoContent(http.StatusNoContent)
}
