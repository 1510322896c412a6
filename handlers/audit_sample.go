package handlers

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// DefaultAuditSampleSources bounds the sources whose refused anonymous
// requests are counted apart in one minute unless configured.
const DefaultAuditSampleSources = 10000

// otherSources is the ClientAddress of the record that counts the refused
// requests of every source beyond the table.
const otherSources = "other"

// refusedSampler stands between the audit log and refused unauthenticated
// requests (401s, unrouted 404s, …): anyone can send those, as many as they
// like, so each is counted, not stored. Per source address (an IPv6 address
// by its /64, which one client holds whole) and minute, one record goes to
// the log: the first request of the minute, with Count set to how many were
// refused; a source's refused credential requests (kubeconfig, talosconfig,
// a Kubernetes credential, …) are counted apart per kind, so an issuance
// refused for want of an identity is still recorded under its kind. At
// most maxSources sources (and kinds) are counted apart in a minute; the rest
// are folded into one record from "other". A minute's records are written by
// the first request after it, by Run's ticker, or when Run stops.
type refusedSampler struct {
	maxSources int
	emit       func(domain.AuditRecord)

	mu     sync.Mutex
	minute time.Time
	counts map[string]*domain.AuditRecord
	other  *domain.AuditRecord
}

func newRefusedSampler(maxSources int, emit func(domain.AuditRecord)) *refusedSampler {
	return &refusedSampler{maxSources: maxSources, emit: emit, counts: map[string]*domain.AuditRecord{}}
}

// add counts a refused request; rec.Time is when it was answered.
func (s *refusedSampler) add(rec domain.AuditRecord) {
	minute := rec.Time.Truncate(time.Minute)
	source := sourceOf(rec.ClientAddress)
	key := source
	if credentialKind(rec.Kind) != "" {
		// A refused credential issuance or download is counted under its
		// own kind, not folded into whatever the source asked first.
		key += "\x00" + rec.Kind
	}
	s.mu.Lock()
	var due []domain.AuditRecord
	if !minute.Equal(s.minute) {
		due = s.takeLocked()
		s.minute = minute
	}
	cur, ok := s.counts[key]
	switch {
	case ok:
	case len(s.counts) < s.maxSources:
		cur = sampled(rec, minute, source)
		s.counts[key] = cur
	default:
		if s.other == nil {
			s.other = sampled(rec, minute, otherSources)
		}
		cur = s.other
	}
	cur.Count++
	s.mu.Unlock()
	s.write(due)
}

// sampled is the record that stands for the refused requests of source in
// the minute, starting with rec.
func sampled(rec domain.AuditRecord, minute time.Time, source string) *domain.AuditRecord {
	rec.Time = minute
	rec.ClientAddress = source
	return &rec
}

// flushDue writes the counts of a minute that has ended by now.
func (s *refusedSampler) flushDue(now time.Time) {
	s.mu.Lock()
	var due []domain.AuditRecord
	if !s.minute.IsZero() && now.Truncate(time.Minute).After(s.minute) {
		due = s.takeLocked()
	}
	s.mu.Unlock()
	s.write(due)
}

// flush writes every count, the current minute's included.
func (s *refusedSampler) flush() {
	s.mu.Lock()
	due := s.takeLocked()
	s.mu.Unlock()
	s.write(due)
}

func (s *refusedSampler) takeLocked() []domain.AuditRecord {
	due := make([]domain.AuditRecord, 0, len(s.counts)+1)
	for _, rec := range s.counts {
		due = append(due, *rec)
	}
	if s.other != nil {
		due = append(due, *s.other)
	}
	clear(s.counts)
	s.other = nil
	return due
}

func (s *refusedSampler) write(recs []domain.AuditRecord) {
	for _, rec := range recs {
		what := "requests"
		if credentialKind(rec.Kind) != "" && rec.ClientAddress != otherSources {
			what = rec.Kind + " requests"
		}
		rec.Detail = truncate(fmt.Sprintf("%d refused unauthenticated %s from %s in this minute; the first is shown",
			rec.Count, what, rec.ClientAddress), maxAuditPath)
		s.emit(rec)
	}
}

// sourceOf is the key a client address is counted under: the address, or
// for IPv6 its /64.
func sourceOf(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return truncate(addr, maxAuditName)
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// RunAuditSampler writes the counts of refused unauthenticated requests of
// each minute to the audit log once the minute has ended, until ctx ends;
// then it writes what it still holds and returns. Without it a minute's
// counts are written by the first refused request after the minute. Stop it
// after the HTTP server has finished its requests and before closing the
// audit log.
func (a *API) RunAuditSampler(ctx context.Context) error {
	if a.refused == nil {
		<-ctx.Done()
		return nil
	}
	defer a.refused.flush()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.refused.flushDue(a.cfg.Now())
		}
	}
}
