package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
)

// afterWrite runs once a write succeeded; what it returns is added to the answer.
type afterWrite func(ctx context.Context, res eventstore.Result) (extra map[string]any, err error)

// kindHooks let a kind take part in the generic REST verbs: strip write-only
// fields, check ownership, and act on secrets around the write.
type kindHooks interface {
	// admit runs before a create, update or delete (obj is nil for delete).
	admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error)
	// admitPatch runs before a merge patch, with the decoded patch.
	admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error)
	// visible says whether the caller may read the object.
	visible(c echo.Context, raw []byte) bool
}

type noHooks struct{}

func (noHooks) admit(echo.Context, domain.Op, domain.Ref, *domain.Object) (afterWrite, error) {
	return nil, nil
}
func (noHooks) admitPatch(echo.Context, domain.Ref, map[string]any) (afterWrite, error) {
	return nil, nil
}
func (noHooks) visible(echo.Context, []byte) bool { return true }

func (a *API) hooksFor(k *domain.KindInfo) kindHooks {
	switch k {
	case domain.UserKind:
		return &userHooks{a: a}
	case domain.APITokenKind:
		return &tokenHooks{a: a}
	case domain.ConfigPatchKind:
		return &configPatchHooks{a: a}
	case domain.ApplyKind:
		return applyHooks{}
	case domain.UpgradeKind:
		return &upgradeHooks{a: a}
	}
	return noHooks{}
}

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

func (h *userHooks) setPasswordAfter(user, pw string) afterWrite {
	return func(ctx context.Context, res eventstore.Result) (map[string]any, error) {
		return nil, h.a.identity.SetPassword(ctx, user, pw)
	}
}

func (h *userHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	if err := h.a.requireIdentity(); err != nil {
		return nil, err
	}
	if op == domain.OpDelete {
		return func(ctx context.Context, res eventstore.Result) (map[string]any, error) {
			if res.Object == nil {
				return nil, h.a.identity.DeletePassword(ctx, ref.Name)
			}
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
	return h.setPasswordAfter(name, pw), nil
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
	return h.setPasswordAfter(ref.Name, pw), nil
}

func (h *userHooks) visible(echo.Context, []byte) bool { return true }

type tokenHooks struct{ a *API }

func tokenOwner(raw []byte) string {
	var t domain.APIToken
	_ = json.Unmarshal(raw, &t)
	return t.Spec.User
}

// owns refuses a non-admin acting on someone else's token.
func (h *tokenHooks) owns(c echo.Context, ref domain.Ref) error {
	if isAdmin(c) {
		return nil
	}
	raw, ok := h.a.cache.Get(ref)
	if !ok {
		return domain.NewNotFound(domain.APITokenKind.Kind, ref.Name)
	}
	if tokenOwner(raw) != identityOf(c).Name {
		// Not found rather than forbidden: other users' token names are not disclosed.
		return domain.NewNotFound(domain.APITokenKind.Kind, ref.Name)
	}
	return nil
}

func (h *tokenHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	if err := h.a.requireIdentity(); err != nil {
		return nil, err
	}
	me := identityOf(c)
	switch op {
	case domain.OpCreate:
		var spec map[string]any
		if len(obj.Spec) > 0 {
			if err := json.Unmarshal(obj.Spec, &spec); err != nil {
				return nil, nil // the normaliser reports it with the field
			}
		}
		if spec == nil {
			spec = map[string]any{}
		}
		owner, _ := spec["user"].(string)
		if owner == "" {
			owner = me.Name
			spec["user"] = owner
		}
		if owner != me.Name && !isAdmin(c) {
			return nil, domain.NewForbidden(domain.APITokenKind.Kind, obj.Metadata.Name, "only admins create tokens for other users")
		}
		if _, ok := h.a.cache.GetObject(domain.Ref{Kind: domain.UserKind.Kind, Name: owner}); !ok {
			return nil, domain.NewInvalid(domain.APITokenKind.Kind, obj.Metadata.Name, []domain.Cause{{Field: "spec.user", Type: domain.CauseInvalid,
				Message: fmt.Sprintf("user %q does not exist", owner)}})
		}
		obj.Spec, _ = json.Marshal(spec)
		if obj.Metadata.Name == "" {
			obj.Metadata.Name = generatedTokenName(owner)
		}
		name := obj.Metadata.Name
		return func(ctx context.Context, res eventstore.Result) (map[string]any, error) {
			tok, err := h.a.identity.IssueAPIToken(ctx, name)
			if err != nil {
				return nil, err
			}
			return map[string]any{"token": tok}, nil
		}, nil
	case domain.OpDelete:
		if err := h.owns(c, ref); err != nil {
			return nil, err
		}
		// Revoke before the object goes, so the token is refused from now on.
		return nil, h.a.identity.RevokeAPIToken(c.Request().Context(), ref.Name)
	default:
		if err := h.owns(c, ref); err != nil {
			return nil, err
		}
		if op == domain.OpUpdate {
			var t domain.APIToken
			_ = json.Unmarshal(obj.Spec, &t.Spec)
			if raw, ok := h.a.cache.Get(ref); ok && t.Spec.User != tokenOwner(raw) {
				return nil, domain.NewInvalid(domain.APITokenKind.Kind, ref.Name, []domain.Cause{{Field: "spec.user", Type: domain.CauseForbidden, Message: "a token's user cannot change"}})
			}
		}
		return nil, nil
	}
}

func (h *tokenHooks) admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	if err := h.a.requireIdentity(); err != nil {
		return nil, err
	}
	if err := h.owns(c, ref); err != nil {
		return nil, err
	}
	if spec, _ := patch["spec"].(map[string]any); spec != nil {
		if u, ok := spec["user"]; ok {
			if raw, found := h.a.cache.Get(ref); found && u != tokenOwner(raw) {
				return nil, domain.NewInvalid(domain.APITokenKind.Kind, ref.Name, []domain.Cause{{Field: "spec.user", Type: domain.CauseForbidden, Message: "a token's user cannot change"}})
			}
		}
	}
	return nil, nil
}

func (h *tokenHooks) visible(c echo.Context, raw []byte) bool {
	return isAdmin(c) || tokenOwner(raw) == identityOf(c).Name
}

func generatedTokenName(owner string) string {
	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	if len(owner) > 50 {
		owner = owner[:50]
	}
	return strings.TrimRight(owner, "-") + "-" + suffix
}

// accountRoutes registers login, logout, whoami and password changes.
func (a *API) accountRoutes(g *authed) {
	a.echo.POST("/api/v1/auth/login", a.login)
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
	return c.JSON(http.StatusOK, map[string]string{"user": id.Name, "role": id.Role, "authMethod": id.AuthMethod})
}

type passwordRequest struct {
	Password        string `json:"password"`
	CurrentPassword string `json:"currentPassword,omitempty"`
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
		ok, err := a.identity.CheckPassword(ctx, name, req.CurrentPassword)
		if err != nil {
			return err
		}
		if !ok {
			return domain.NewInvalid(domain.UserKind.Kind, name, []domain.Cause{{Field: "currentPassword", Type: domain.CauseInvalid, Message: "is not the current password"}})
		}
	}
	if causes := domain.ValidatePassword(req.Password, "password"); causes != nil {
		return domain.NewInvalid(domain.UserKind.Kind, name, causes)
	}
	if err := a.identity.SetPassword(ctx, name, req.Password); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
