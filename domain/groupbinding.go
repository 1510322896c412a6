package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits on group bindings and the groups an identity provider reports.
const (
	MaxGroupBindingGroups = 64
	MaxGroupNameLength    = 256
	// MaxGroupsPerIdentity bounds the groups kept from one ID token: an
	// identity provider that reports more is cut there (and the login says so).
	MaxGroupsPerIdentity = 256
)

// GroupBindingKind gives the members of identity-provider groups a role,
// the way a user's own role and bindings do: a global role, tenant bindings
// by name or selector, or both. It applies to users who signed in through
// single sign-on, with the groups their identity provider reported at their
// last login or session refresh.
var GroupBindingKind = register(&KindInfo{
	Kind: "GroupBinding", Plural: "groupbindings", Subject: "groupbinding",
	NormalizeSpec: func(raw json.RawMessage) (json.RawMessage, []Cause) {
		return normalizeAs[GroupBindingSpec](raw, "spec")
	},
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[EmptyStatus](raw, "status") },
})

// GroupBindingSpec declares what members of some groups may do.
type GroupBindingSpec struct {
	// Groups are identity-provider group names, as the groups claim carries
	// them; a member of any of them gets the role and bindings.
	Groups []string `json:"groups"`
	// Role is a global role (admin, edit, view) or none (default: only the
	// bindings).
	Role string `json:"role,omitempty"`
	// Bindings grant roles on some tenants, as a user's bindings do.
	Bindings []RoleBinding `json:"bindings,omitempty"`
}

// Default makes an unset role none.
func (s *GroupBindingSpec) Default() {
	if s.Role == "" {
		s.Role = RoleNone
	}
}

// Validate reports every bad field.
func (s *GroupBindingSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	var causes []Cause
	switch {
	case len(s.Groups) == 0:
		causes = append(causes, Cause{Field: f.Child("groups").String(), Type: CauseRequired, Message: "must name at least one group"})
	case len(s.Groups) > MaxGroupBindingGroups:
		causes = append(causes, Cause{Field: f.Child("groups").String(), Type: CauseTooLong, Message: fmt.Sprintf("must have no more than %d groups", MaxGroupBindingGroups)})
	default:
		for i, g := range s.Groups {
			if msg := groupNameProblem(g); msg != "" {
				causes = append(causes, Cause{Field: f.Child("groups").Index(i).String(), Type: CauseInvalid, Message: msg})
			}
		}
	}
	causes = append(causes, oneOf(s.Role, f.Child("role"), RoleAdmin, RoleEdit, RoleView, RoleNone)...)
	causes = append(causes, validateBindings(s.Bindings, f.Child("bindings"))...)
	if s.Role == RoleNone && len(s.Bindings) == 0 && len(causes) == 0 {
		causes = append(causes, Cause{Field: f.Child("bindings").String(), Type: CauseRequired, Message: "must grant something: a global role or tenant bindings"})
	}
	return causes
}

// groupNameProblem says what is wrong with a group name, or "".
func groupNameProblem(g string) string {
	switch {
	case g == "":
		return "must not be empty"
	case len(g) > MaxGroupNameLength:
		return fmt.Sprintf("must be no more than %d bytes", MaxGroupNameLength)
	case strings.IndexFunc(g, unicode.IsControl) >= 0:
		return "must not contain control characters"
	}
	return ""
}

// ValidGroupName reports whether an identity provider's group name may be
// kept (bound to, and carried in a cluster certificate).
func ValidGroupName(g string) bool { return groupNameProblem(g) == "" }

// GroupBinding is the typed view of a GroupBinding object.
type GroupBinding struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   ObjectMeta       `json:"metadata"`
	Spec       GroupBindingSpec `json:"spec"`
}

// GroupGrant is what group bindings give one set of groups: the highest
// global role among the bindings that name one of the groups, and all
// their tenant bindings.
func GroupGrant(bindings []GroupBindingSpec, groups []string) (role string, tenantBindings []RoleBinding) {
	role = RoleNone
	if len(groups) == 0 {
		return role, nil
	}
	member := make(map[string]struct{}, len(groups))
	for _, g := range groups {
		member[g] = struct{}{}
	}
	for _, b := range bindings {
		hit := false
		for _, g := range b.Groups {
			if _, ok := member[g]; ok {
				hit = true
				break
			}
		}
		if !hit {
			continue
		}
		role = maxRole(role, b.Role)
		tenantBindings = append(tenantBindings, b.Bindings...)
	}
	return role, tenantBindings
}
