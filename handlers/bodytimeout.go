package handlers

import (
	"io"
	"net/http"
	"time"
)

// DefaultBodyReadTimeout is how long a client has to send a request's body
// once its headers are in (a 32 MiB state over a slow link included).
const DefaultBodyReadTimeout = time.Minute

// BodyReadTimeout bounds the time h's requests take to send their bodies:
// a client that sends headers and then trickles (or stalls) its body holds a
// connection and a handler, and http.Server's ReadTimeout cannot be used for
// it, since its deadline also cuts off the long-lived answers (watches,
// follow=true) once the request is read. So the connection's read deadline
// is set to now+d when a request with a body starts, and cleared as soon as
// the body has been read to its end; a handler reading past the deadline gets
// an i/o timeout error (answered 400). Requests without a body are not
// touched (http.Server's ReadHeaderTimeout bounds their headers). d <= 0
// returns h unchanged.
func BodyReadTimeout(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			// Not supported by this ResponseWriter (an in-process call).
			h.ServeHTTP(w, r)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody clears the read deadline once the body has been read whole.
type deadlineBody struct {
	io.ReadCloser
	clear   func()
	cleared bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.cleared {
		b.cleared = true
		b.clear()
	}
	return n, err
}
