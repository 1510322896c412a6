package domain

import "time"

// ReplicaListKind is the kind of the document GET /api/v1/replicas answers:
// the replicas running on this data, as their heartbeats say. It is not a
// stored resource; a heartbeat lives in the KV bucket rezus-replicas for a
// few seconds after its replica's last beat.
const ReplicaListKind = "ReplicaList"

// ReplicaList is every live replica and the schema levels they agree on.
type ReplicaList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Self is the holder of the replica that answered, so a client behind a
	// balancer knows which one it talks to; empty when the server runs
	// without heartbeats.
	Self string `json:"self,omitempty"`
	// SchemaLevel is the newest storage schema level the answering replica
	// reads and writes.
	SchemaLevel int `json:"schemaLevel"`
	// ClusterSchemaLevel is the lowest level every running replica reads;
	// WriteSchemaLevel what the answering replica writes (capped by
	// --write-schema-level).
	ClusterSchemaLevel int       `json:"clusterSchemaLevel"`
	WriteSchemaLevel   int       `json:"writeSchemaLevel"`
	Items              []Replica `json:"items"`
	// UnknownPeers are NATS nodes of the cluster no heartbeat names: a
	// release before heartbeats (0.1.0), counted as level 1.
	UnknownPeers []string `json:"unknownPeers,omitempty"`
}

// Replica is one running replica, from its last heartbeat.
type Replica struct {
	// Holder names the replica (host-pid), as its leases and tenant claims do.
	Holder string `json:"holder"`
	// ID names this run of the replica: a replica restarted under the same
	// holder has a new one. Empty for releases before 0.4.0.
	ID string `json:"id,omitempty"`
	// Version is the release it runs, e.g. "0.4.0".
	Version string `json:"version"`
	// StartedAt is when it started; Seen when it last beat.
	StartedAt time.Time `json:"startedAt"`
	Seen      time.Time `json:"seen"`
	// Tenants is how many tenants it works; nil when its release does not
	// say (before 0.4.0).
	Tenants *int `json:"tenants,omitempty"`
	// NATSServer is the NATS node it embeds; empty with an external NATS.
	NATSServer string `json:"natsServer,omitempty"`
	// SchemaLevel is the newest storage schema level it reads.
	SchemaLevel int `json:"schemaLevel"`
}
