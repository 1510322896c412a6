// Package controller is the runtime of RezusCloud's long-running consumers,
// the controllers of the controllers/ wing: it holds a lease so that one
// replica works at a time, feeds a durable JetStream consumer's events into
// a durable per-key queue (a KV bucket), and runs the queued keys one run
// per key at a time, in parallel across keys up to a bound, with backoff
// after a failure. Queued work survives a restart or a change of leader
// because the queue lives in JetStream, not in memory.
//
// A controller holds only its decisions and effects: which keys an event
// touches, when a queued key is due, and what one run of a key does (the
// Controller interface). Build (builder.go) makes the rest from a Spec —
// the names of the lease, consumer and queue, the kinds it reads, its
// timing, the read model to catch up and the keys with work to queue when
// the lease is taken and at each resync — and Required checks a Config's
// required fields. Packages that run a consumer import this one; it
// imports domain and eventstore only.
package controller
