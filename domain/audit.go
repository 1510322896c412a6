package domain

import "time"

// AuditRecord is one entry of the audit trail: who did what to which object,
// from where, and how it ended. It never holds request bodies, headers or
// query strings.
type AuditRecord struct {
	// Seq is the record's stream sequence; set when read, never stored.
	Seq uint64 `json:"seq,omitempty"`
	// Time is when the request finished.
	Time time.Time `json:"time"`
	// Actor is the caller's identity name; empty when the request was not authenticated.
	Actor string `json:"actor"`
	// Role is the caller's role (admin, edit, view); empty when not authenticated.
	Role   string `json:"role,omitempty"`
	Method string `json:"method"`
	// Path is the request path, without the query string.
	Path string `json:"path"`
	// Kind is the resource kind (e.g. NodeGroup) or credential kind (e.g.
	// Kubeconfig) the request was about; empty when the route names none.
	Kind string `json:"kind,omitempty"`
	// Tenant is the tenant the object belongs to; for a Tenant it is the tenant itself.
	Tenant string `json:"tenant,omitempty"`
	// Name is the object's name when the route carries it.
	Name string `json:"name,omitempty"`
	// Code is the HTTP status code of the answer.
	Code int `json:"code"`
	// RequestID is the request's X-Request-Id, also the correlation id of the events it caused.
	RequestID     string `json:"requestId,omitempty"`
	ClientAddress string `json:"clientAddress,omitempty"`
	// Detail is what the handler adds about the request, e.g. the lock a
	// force-unlock released. Never a secret.
	Detail string `json:"detail,omitempty"`
	// Count, when set, makes the record stand for Count refused
	// unauthenticated requests from ClientAddress in the minute starting at
	// Time (they are sampled, not stored one by one); the other fields are
	// those of the first of them. ClientAddress "other" holds the sources
	// beyond the sampler's table.
	Count int `json:"count,omitempty"`
}
