package domain

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RoleNone is a user's global role when it has access only through its
// tenant bindings.
const RoleNone = "none"

// Limits on bindings.
const (
	MaxBindings          = 64
	MaxBindingTenants    = 256
	MaxTenantSelectorLen = 1024
)

// RoleBinding grants a role on some tenants: those named, or those whose
// labels match the selector (exactly one of the two).
type RoleBinding struct {
	// Role is view, edit or admin, within the bound tenants.
	Role string `json:"role"`
	// Tenants names the tenants.
	Tenants []string `json:"tenants,omitempty"`
	// TenantSelector is a label selector on tenants ("env=prod,team in (a,b)").
	TenantSelector string `json:"tenantSelector,omitempty"`
}

// validateBindings reports every bad field of a bindings list.
func validateBindings(bs []RoleBinding, f *field.Path) []Cause {
	if len(bs) > MaxBindings {
		return []Cause{{Field: f.String(), Type: CauseTooLong, Message: fmt.Sprintf("must have no more than %d bindings", MaxBindings)}}
	}
	var causes []Cause
	for i, b := range bs {
		bf := f.Index(i)
		causes = append(causes, oneOf(b.Role, bf.Child("role"), RoleAdmin, RoleEdit, RoleView)...)
		switch {
		case len(b.Tenants) == 0 && b.TenantSelector == "":
			causes = append(causes, Cause{Field: bf.String(), Type: CauseRequired, Message: "must name tenants or give a tenantSelector"})
		case len(b.Tenants) > 0 && b.TenantSelector != "":
			causes = append(causes, Cause{Field: bf.String(), Type: CauseInvalid, Message: "must name tenants or give a tenantSelector, not both"})
		}
		if len(b.Tenants) > MaxBindingTenants {
			causes = append(causes, Cause{Field: bf.Child("tenants").String(), Type: CauseTooLong, Message: fmt.Sprintf("must have no more than %d names", MaxBindingTenants)})
		} else {
			for j, t := range b.Tenants {
				causes = append(causes, ValidateName(t, bf.Child("tenants").Index(j).String())...)
			}
		}
		if len(b.TenantSelector) > MaxTenantSelectorLen {
			causes = append(causes, Cause{Field: bf.Child("tenantSelector").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d characters", MaxTenantSelectorLen)})
		} else if b.TenantSelector != "" {
			if _, err := ParseSelector(b.TenantSelector); err != nil {
				causes = append(causes, Cause{Field: bf.Child("tenantSelector").String(), Type: CauseInvalid, Message: errorMessage(err)})
			}
		}
	}
	return causes
}

func errorMessage(err error) string {
	if e, ok := err.(*Error); ok {
		if len(e.Causes) > 0 {
			return e.Causes[0].Message
		}
		return e.Message
	}
	return err.Error()
}

// RoleRank orders roles: none 0, view 1, edit 2, admin 3 (unknown: 0).
func RoleRank(role string) int {
	switch role {
	case RoleView:
		return 1
	case RoleEdit:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

func maxRole(a, b string) string {
	if RoleRank(b) > RoleRank(a) {
		return b
	}
	return a
}

func minRole(a, b string) string {
	if RoleRank(b) < RoleRank(a) {
		return b
	}
	return a
}

// Access is what one identity may do: a global role over everything, plus
// roles on tenants through bindings. A narrowed credential (an API token with
// its own bindings) has a Cap: it never gets more than its owner has, checked
// at every use since the owner's access may shrink after the token was made.
type Access struct {
	global   string
	bindings []compiledBinding
	cap      *Access
}

type compiledBinding struct {
	role    string
	tenants map[string]struct{}
	sel     Selector
	bySel   bool
}

// NewAccess compiles a global role and bindings (bindings whose selector does
// not parse are ignored: they were validated at write time).
func NewAccess(global string, bindings []RoleBinding) Access {
	a := Access{global: global}
	if RoleRank(global) == 0 {
		a.global = RoleNone
	}
	for _, b := range bindings {
		if RoleRank(b.Role) == 0 {
			continue
		}
		cb := compiledBinding{role: b.Role}
		if b.TenantSelector != "" {
			sel, err := ParseSelector(b.TenantSelector)
			if err != nil {
				continue
			}
			cb.sel, cb.bySel = sel, true
		} else {
			cb.tenants = make(map[string]struct{}, len(b.Tenants))
			for _, t := range b.Tenants {
				cb.tenants[t] = struct{}{}
			}
		}
		a.bindings = append(a.bindings, cb)
	}
	return a
}

// GlobalAccess is access by a global role alone.
func GlobalAccess(role string) Access { return NewAccess(role, nil) }

// Narrowed is a credential limited to bindings (no global role), within a's access.
func (a Access) Narrowed(bindings []RoleBinding) Access {
	n := NewAccess(RoleNone, bindings)
	owner := a
	n.cap = &owner
	return n
}

// Global is the role over everything (RoleNone when there is none).
func (a Access) Global() string {
	g := a.global
	if g == "" {
		g = RoleNone
	}
	if a.cap != nil {
		g = minRole(g, a.cap.Global())
	}
	return g
}

// Scoped reports whether the identity has bindings (its access differs per tenant).
func (a Access) Scoped() bool { return len(a.bindings) > 0 || a.cap != nil }

// TenantRole is the highest role the identity has on the tenant named, with
// those labels: the global role or any binding that covers it.
func (a Access) TenantRole(tenant string, labels map[string]string) string {
	r := a.global
	if r == "" {
		r = RoleNone
	}
	for _, b := range a.bindings {
		if RoleRank(b.role) <= RoleRank(r) {
			continue
		}
		if b.covers(tenant, labels) {
			r = b.role
		}
	}
	if a.cap != nil {
		r = minRole(r, a.cap.TenantRole(tenant, labels))
	}
	return r
}

func (b compiledBinding) covers(tenant string, labels map[string]string) bool {
	if b.bySel {
		return b.sel.Matches(labels)
	}
	_, ok := b.tenants[tenant]
	return ok
}

// Highest is the highest role the identity has anywhere (globally or on some tenant).
func (a Access) Highest() string {
	r := a.global
	if r == "" {
		r = RoleNone
	}
	for _, b := range a.bindings {
		r = maxRole(r, b.role)
	}
	if a.cap != nil {
		r = minRole(r, a.cap.Highest())
	}
	return r
}

// NarrowerThan checks that bindings grant no role above what a has at its
// highest: a token can never be made wider than its owner. Per-tenant
// narrowing is enforced at every use by the cap.
func (a Access) NarrowerThan(bindings []RoleBinding, f *field.Path) []Cause {
	top := a.Highest()
	var causes []Cause
	for i, b := range bindings {
		if RoleRank(b.Role) > RoleRank(top) {
			causes = append(causes, Cause{Field: f.Index(i).Child("role").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("%q is wider than the owner's access (at most %q)", b.Role, top)})
		}
	}
	return causes
}

// String describes the access for messages.
func (a Access) String() string {
	if !a.Scoped() {
		return a.Global()
	}
	return a.Global() + " with tenant bindings"
}
