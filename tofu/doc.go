// Package tofu is the OpenTofu engine the controllers run tofu through:
// the binary and its CLI configuration (tofu.go: a clean environment, the
// provider mirror, interrupt then kill on cancel, the process marks of
// internal/proctree), the mount-namespace sandbox that keeps module
// providers' code away from the server's files (sandbox*.go), state
// encryption through TF_ENCRYPTION (encryption.go) and its reader
// (state_decrypt.go), tofu's JSON UI parsed into phases, summaries and
// planned changes (tofuui.go), the redaction of diagnostics before readers
// see them (diagnostic_redact.go), and apply logs in a JetStream stream
// (logs.go).
//
// It knows nothing of tenants' runs: controllers/apply and
// controllers/modulecheck run tofu through it, and the HTTP handlers read
// apply logs from it (handlers/applies.go).
package tofu
