package domain

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// KindInfo describes one resource kind: its names, scope and the hooks that
// default, validate and canonicalise its spec and status.
type KindInfo struct {
	// Kind is the CamelCase name, e.g. "NodeGroup".
	Kind string
	// Plural is the lower-case URL segment, e.g. "nodegroups".
	Plural string
	// Subject is the lower-case token used in event subjects and KV bucket names.
	Subject string
	// TenantScoped kinds live under a tenant; the others are cluster-scoped.
	TenantScoped bool
	// NormalizeSpec strictly decodes, defaults and validates a spec and returns
	// its canonical JSON. Causes use field paths rooted at "spec".
	NormalizeSpec func(raw json.RawMessage) (json.RawMessage, []Cause)
	// NormalizeStatus does the same for a status written by a controller.
	NormalizeStatus func(raw json.RawMessage) (json.RawMessage, []Cause)
	// CreateSpec, when set, fills in what only a new object gets by default
	// (a new tenant's backup schedule), given the normalised spec; it must
	// return canonical JSON, or the causes of a refusal. Optional.
	CreateSpec func(spec json.RawMessage) (json.RawMessage, []Cause)
	// UpdateSpec, when set, carries over from the current spec what an
	// update that leaves a field out keeps (a tenant's backup schedule),
	// given both normalised specs; it must return canonical JSON, or the
	// causes of a refusal (node groups' members). Optional.
	UpdateSpec func(current, next json.RawMessage) (json.RawMessage, []Cause)
	// InitialStatus is the status of a freshly created object (may be nil).
	InitialStatus func() json.RawMessage
	// SpecEvent names the event for a spec change from old to new, when the kind
	// has a more telling name than <Kind>Updated (e.g. NodeGroupScaled). Optional.
	SpecEvent func(old, new json.RawMessage) string
	// MetaEvent names the event for a change of metadata alone (the spec is
	// unchanged), when the kind has a more telling name than <Kind>Updated
	// (e.g. MachineConfigApplied). Optional.
	MetaEvent func(old, new *ObjectMeta) string
}

var kinds = map[string]*KindInfo{}

func register(k *KindInfo) *KindInfo {
	kinds[k.Kind] = k
	return k
}

// LookupKind finds a kind by its Kind name, plural or subject token.
func LookupKind(name string) (*KindInfo, bool) {
	if k, ok := kinds[name]; ok {
		return k, true
	}
	for _, k := range kinds {
		if k.Plural == name || k.Subject == name {
			return k, true
		}
	}
	return nil, false
}

// MustKind returns a registered kind or panics; for use with constant names.
func MustKind(name string) *KindInfo {
	k, ok := LookupKind(name)
	if !ok {
		panic("domain: unknown kind " + name)
	}
	return k
}

// Kinds returns every registered kind, sorted by Kind name.
func Kinds() []*KindInfo {
	return slices.SortedFunc(maps.Values(kinds), func(a, b *KindInfo) int { return strings.Compare(a.Kind, b.Kind) })
}

// ClusterScope is the tenant token used in subjects and keys of cluster-scoped kinds.
const ClusterScope = "_"

// Ref names one object.
type Ref struct {
	Kind   string
	Tenant string
	Name   string
}

// Scope returns the tenant, or "_" for cluster-scoped objects.
func (r Ref) Scope() string {
	if r.Tenant == "" {
		return ClusterScope
	}
	return r.Tenant
}

// Key is the projection key "<tenant-or-_>.<name>".
func (r Ref) Key() string { return r.Scope() + "." + r.Name }

// Subject is the event-stream subject of the aggregate.
func (r Ref) Subject() string {
	return SubjectPrefix + "." + MustKind(r.Kind).Subject + "." + r.Scope() + "." + r.Name
}

func (r Ref) String() string {
	if r.Tenant == "" {
		return fmt.Sprintf("%s/%s", strings.ToLower(r.Kind), r.Name)
	}
	return fmt.Sprintf("%s/%s/%s", r.Tenant, strings.ToLower(r.Kind), r.Name)
}

// SubjectPrefix is the prefix of every resource-event subject.
const SubjectPrefix = "rezus.evt"

// SubjectFilter returns the subject filter for events of a kind, optionally
// narrowed to one tenant ("" means all tenants) and one name ("" means all).
func SubjectFilter(kind *KindInfo, tenant, name string) string {
	scope := "*"
	if !kind.TenantScoped {
		scope = ClusterScope
	} else if tenant != "" {
		scope = tenant
	}
	if name == "" {
		name = "*"
	}
	return SubjectPrefix + "." + kind.Subject + "." + scope + "." + name
}

// ParseSubject splits a resource-event subject into its reference.
func ParseSubject(subject string) (Ref, bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0]+"."+parts[1] != SubjectPrefix {
		return Ref{}, false
	}
	k, ok := LookupKind(parts[2])
	if !ok {
		return Ref{}, false
	}
	r := Ref{Kind: k.Kind, Name: parts[4]}
	if parts[3] != ClusterScope {
		r.Tenant = parts[3]
	}
	return r, true
}
