// Package identity owns who may call RezusCloud: users' passwords, browser
// sessions (signed JWTs whose ids live in a sessions bucket, so logout and a
// disabled user take effect at once), API tokens, the break-glass static
// token, the login limiter, CSRF tokens for the web UI, provider credentials
// and the short-lived credentials an apply presents to the state backend.
//
// Secrets (password and token hashes, signing keys, provider credentials)
// live in a SecretStore, never in events or projections; users and tokens
// themselves are ordinary resources of the event store, read from the
// projections cache. handlers and webui import this package; it imports
// domain, eventstore and projections only, and knows nothing of HTTP routing.
package identity
