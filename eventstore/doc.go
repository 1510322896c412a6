// Package eventstore is RezusCloud's system of record: a NATS JetStream stream of
// domain events, one subject per aggregate, with optimistic concurrency enforced
// by JetStream itself (Nats-Expected-Last-Subject-Sequence) and idempotent
// appends (Nats-Msg-Id). It starts an embedded NATS server under the data dir or
// connects to an external cluster, provisions its streams and buckets, and offers
// load, append, replay and follow.
//
// The projections, the apply worker and the handlers import it; it imports only domain.
package eventstore
