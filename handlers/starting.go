package handlers

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Starting is the HTTP handler of a server that listens before it can serve:
// while a replica waits for its NATS cluster (a meta leader, peers to place
// streams on), load balancers and probes must get an answer, not a refused
// connection. Until Ready is called, /healthz answers 200 (the process is
// alive), and /readyz and every other path 503 with what the server waits
// for; from then on every request goes to the handler given to Ready.
type Starting struct {
	status atomic.Pointer[string]
	next   atomic.Pointer[http.Handler]
}

// NewStarting returns a handler that says it is starting.
func NewStarting() *Starting {
	s := &Starting{}
	s.SetStatus("starting")
	return s
}

// SetStatus says what the server waits for, as /readyz reports it.
func (s *Starting) SetStatus(msg string) { s.status.Store(&msg) }

// Ready hands every later request to h.
func (s *Starting) Ready(h http.Handler) { s.next.Store(&h) }

func (s *Starting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.next.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte("ok"))
		return
	}
	st := domain.StatusOf(&domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "not ready: " + *s.status.Load(), RetryAfterSeconds: 1})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(st)
}
