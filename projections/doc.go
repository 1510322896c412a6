// Package projections materialises read models from the event stream: an
// in-memory index per replica (the Cache) that serves gets, lists with label
// selectors and pagination, and read-after-write waits; the Projector
// that writes one KV bucket per kind for external readers and can be rebuilt
// byte-for-byte from the stream; watches that resume exactly after a
// resourceVersion; and the tenant finalizer that cascades tenant deletion.
//
// Handlers and controllers import it; it imports domain and eventstore.
package projections
