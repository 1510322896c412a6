package domain

import (
	"encoding/json"
	"maps"
	"time"
)

// APIVersion is the apiVersion of every RezusCloud object.
const APIVersion = "rezuscloud.io/v1"

// ObjectMeta is the metadata every object carries, after Kubernetes' ObjectMeta.
type ObjectMeta struct {
	Name string `json:"name"`
	// Tenant is the owning tenant of a tenant-scoped object (like a Kubernetes
	// namespace); empty for cluster-scoped kinds.
	Tenant string `json:"tenant,omitempty"`
	UID    string `json:"uid,omitempty"`
	// ResourceVersion is opaque to clients. It is the event-stream sequence of the
	// object's last event, so a stale writer is refused by the stream itself.
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	Finalizers        []string          `json:"finalizers,omitempty"`
}

// Object is the uniform envelope of every kind. Spec and status are kept as
// canonical JSON (produced by the kind's normaliser), so stores, projections and
// handlers work on any kind without knowing its Go type; the typed views
// (TenantSpec, ...) are for validation and for code that reads a kind.
type Object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// Ref returns the reference of the object.
func (o *Object) Ref() Ref {
	return Ref{Kind: o.Kind, Tenant: o.Metadata.Tenant, Name: o.Metadata.Name}
}

// Terminating reports whether deletion of the object has been requested.
func (o *Object) Terminating() bool { return o.Metadata.DeletionTimestamp != nil }

// DeepCopy returns a copy that shares nothing mutable with o.
func (o *Object) DeepCopy() *Object {
	if o == nil {
		return nil
	}
	c := *o
	c.Metadata.Labels = maps.Clone(o.Metadata.Labels)
	c.Metadata.Annotations = maps.Clone(o.Metadata.Annotations)
	if o.Metadata.Finalizers != nil {
		c.Metadata.Finalizers = append([]string(nil), o.Metadata.Finalizers...)
	}
	if o.Metadata.CreationTimestamp != nil {
		t := *o.Metadata.CreationTimestamp
		c.Metadata.CreationTimestamp = &t
	}
	if o.Metadata.DeletionTimestamp != nil {
		t := *o.Metadata.DeletionTimestamp
		c.Metadata.DeletionTimestamp = &t
	}
	c.Spec = append(json.RawMessage(nil), o.Spec...)
	c.Status = append(json.RawMessage(nil), o.Status...)
	return &c
}

// Condition is one observation about an object, as in Kubernetes.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // True, False or Unknown
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	ObservedGeneration int64     `json:"observedGeneration,omitempty"`
}

// List is the body of a list response.
type List struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   ListMeta  `json:"metadata"`
	Items      []*Object `json:"items"`
}

// ListMeta carries the version the list was read at and the continue token.
type ListMeta struct {
	ResourceVersion    string `json:"resourceVersion"`
	Continue           string `json:"continue,omitempty"`
	RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
}

// SetCondition sets c in conds (by type) and returns the list: its transition
// time is now (to the second) when its status changed or it is new, and kept
// otherwise, as Kubernetes controllers do.
func SetCondition(conds []Condition, c Condition, now time.Time) []Condition {
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	for i, old := range conds {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

// FindCondition returns the condition of type typ, or nil.
func FindCondition(conds []Condition, typ string) *Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
