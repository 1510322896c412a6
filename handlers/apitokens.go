package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// tokenHooks guard API tokens: a non-admin sees and writes only its own; a
// user owns at most identity's MaxTokensPerUser; descriptions are bounded and
// self-service writes rate-limited; the secret is issued after the create and
// revoked before the delete.
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
		if err := checkDescription(obj.Metadata.Name, spec); err != nil {
			return nil, err
		}
		if err := h.checkBindings(obj.Metadata.Name, owner, spec); err != nil {
			return nil, err
		}
		if n, limit := h.a.identity.TokenCount(owner), h.a.identity.MaxTokensPerUser(); n >= limit {
			return nil, domain.NewForbidden(domain.APITokenKind.Kind, obj.Metadata.Name,
				fmt.Sprintf("user %q already has %d API tokens, the most one user may have; delete one first", owner, limit))
		}
		if err := h.limitWrite(c); err != nil {
			return nil, err
		}
		obj.Spec, _ = json.Marshal(spec)
		if obj.Metadata.Name == "" {
			obj.Metadata.Name = generatedTokenName(owner)
		}
		name := obj.Metadata.Name
		return func(ctx context.Context, res eventstore.Result) (map[string]any, error) {
			tok, err := h.a.identity.IssueAPIToken(ctx, name, owner)
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
			if err := checkDescription(ref.Name, map[string]any{"description": t.Spec.Description}); err != nil {
				return nil, err
			}
			var stored domain.APIToken
			if raw, ok := h.a.cache.Get(ref); ok && json.Unmarshal(raw, &stored) == nil && !slices.EqualFunc(stored.Spec.Bindings, t.Spec.Bindings, sameBinding) {
				return nil, bindingsFixed(ref.Name)
			}
		}
		return nil, h.limitWrite(c)
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
		if err := checkDescription(ref.Name, spec); err != nil {
			return nil, err
		}
		if _, ok := spec["bindings"]; ok {
			return nil, bindingsFixed(ref.Name)
		}
	}
	return nil, h.limitWrite(c)
}

// checkBindings refuses token bindings wider than the owner's access.
func (h *tokenHooks) checkBindings(name, owner string, spec map[string]any) error {
	raw, ok := spec["bindings"]
	if !ok || raw == nil {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var bindings []domain.RoleBinding
	if json.Unmarshal(b, &bindings) != nil {
		return nil // the normaliser reports it with the field
	}
	u, ok, err := projections.Get[domain.User](h.a.cache, domain.ObjectRef(domain.UserKind, "", owner))
	if err != nil || !ok {
		return nil // the owner check above answers
	}
	if causes := domain.NewAccess(u.Spec.Role, u.Spec.Bindings).NarrowerThan(bindings, field.NewPath("spec", "bindings")); len(causes) > 0 {
		return domain.NewInvalid(domain.APITokenKind.Kind, name, causes)
	}
	return nil
}

func sameBinding(a, b domain.RoleBinding) bool {
	return a.Role == b.Role && a.TenantSelector == b.TenantSelector && slices.Equal(a.Tenants, b.Tenants)
}

func bindingsFixed(name string) error {
	return domain.NewInvalid(domain.APITokenKind.Kind, name, []domain.Cause{{Field: "spec.bindings", Type: domain.CauseForbidden,
		Message: "a token's bindings are set when it is made and cannot change; make a new token"}})
}

// maxTokenDescription bounds an API token's description, in bytes.
const maxTokenDescription = 1024

// checkDescription refuses a description longer than maxTokenDescription.
func checkDescription(name string, spec map[string]any) error {
	if d, _ := spec["description"].(string); len(d) > maxTokenDescription {
		return domain.NewInvalid(domain.APITokenKind.Kind, name, []domain.Cause{{Field: "spec.description", Type: domain.CauseTooLong,
			Message: fmt.Sprintf("must be at most %d bytes (it has %d)", maxTokenDescription, len(d))}})
	}
	return nil
}

// limitWrite rate-limits a non-admin's writes of its own tokens (never a
// revocation): each one is an event, and a viewer must not fill the stream.
func (h *tokenHooks) limitWrite(c echo.Context) error {
	if isAdmin(c) {
		return nil
	}
	return h.a.identity.AllowTokenWrite(identityOf(c).Name)
}

func (h *tokenHooks) filtersVisibility() {}

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
