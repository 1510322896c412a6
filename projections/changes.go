package projections

import (
	"context"
	"strings"
	"sync"
)

// changeSub is one Changes caller: its subject filters and where the latest
// matching sequence waits for it.
type changeSub struct {
	filters []string
	ch      chan uint64
	once    sync.Once
}

// Changes reports the stream sequence of events on subjects (NATS filters,
// with * and >) from now on, as the read model applies them: what a live page
// needs to know it must re-render (and that the read model already shows the
// change). A burst comes as its latest sequence (a reader that falls behind
// gets the newest, never a backlog), and no JetStream consumer is made per
// caller: every change feed is served from the read model's one. stop ends
// the feed; so does the end of ctx.
func (c *Cache) Changes(ctx context.Context, subjects []string) (changes <-chan uint64, stop func(), err error) {
	sub := &changeSub{filters: append([]string(nil), subjects...), ch: make(chan uint64, 1)}
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[*changeSub]struct{}{}
	}
	c.subs[sub] = struct{}{}
	c.mu.Unlock()
	remove := func() {
		sub.once.Do(func() {
			c.mu.Lock()
			delete(c.subs, sub)
			c.mu.Unlock()
		})
	}
	stopAfter := context.AfterFunc(ctx, remove)
	return sub.ch, func() {
		stopAfter()
		remove()
	}, nil
}

// notify tells every change feed whose filters match subject that seq was
// applied. The caller holds c.mu.
func (c *Cache) notify(subject string, seq uint64) {
	for sub := range c.subs {
		if !anySubjectMatches(sub.filters, subject) {
			continue
		}
		// Only notify sends on the channel, so after taking out a value
		// the reader has not taken yet there is room for the newer one.
		select {
		case sub.ch <- seq:
		default:
			select {
			case <-sub.ch:
			default:
			}
			sub.ch <- seq
		}
	}
}

func anySubjectMatches(filters []string, subject string) bool {
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// subjectMatches reports whether a NATS subject matches a filter: "*" is one
// token, ">" one or more trailing tokens.
func subjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		if ft == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if ft != "*" && ft != st {
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}
