// Package webui is the server-rendered web interface: templ components, HTMX
// for partial updates and Server-Sent Events for live ones, Tailwind CSS.
//
// The UI performs every operation through the REST API's own handler, in
// process, with the signed-in user's session: validation, role checks,
// read-after-write and the audit trail are the API's, so the UI cannot drift
// from it. Pages read the same way; live fragments are re-rendered when the
// event stream shows a change to what they display. Static assets (Tailwind's
// output, htmx and its SSE extension) are built from npm by `npm run build` in
// this directory, committed under static/, and embedded, so `go build` alone
// serves the UI. static/live.js is hand-written: it closes each live stream
// while its tab is hidden and reopens it with ?seen= digests of what the
// page shows when it is visible again, so many open tabs do not use up the
// browser's six HTTP/1.1 connections. It also moves on, each second, the
// elapsed time and time left of a saga step that waits (wait.templ), which
// the server renders as of the wait's last record so that the fragment does
// not change between records.
//
// Controls that change shared resources carry the attribute data-mutating and
// are rendered only for roles that may use them (the API refuses the others
// anyway); controls any user may use on their own account (password, own API
// tokens) carry data-self-service. The browser tests check that a view user's
// pages have no data-mutating element.
//
// cmd/rezuscloud mounts it with Handler in front of the API.
package webui
