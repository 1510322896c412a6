package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Entry is a key's queued work: written when an event touches the key and
// deleted (compare-and-set on the revision a run started from) when a run
// is done, so work queued during a run survives it as a follow-up, and work
// queued before a crash is still there after a restart.
type Entry struct {
	// First is when the oldest unhandled change was queued; Last the newest.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Sources are the changes, "<Kind>/<name>@<sequence>", newest last.
	Sources []string `json:"sources,omitempty"`
}

// OpenQueue provisions the queue bucket.
func OpenQueue(ctx context.Context, s *eventstore.Store, bucket, description string) (jetstream.KeyValue, error) {
	kv, err := s.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Description: description, History: 1,
		Storage: jetstream.FileStorage, Replicas: s.Replicas(),
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// Enqueue records that key has work because of source (may be ""), keeping
// at most maxSources sources (0: all).
func Enqueue(ctx context.Context, kv jetstream.KeyValue, key, source string, now time.Time, maxSources int) error {
	for range 20 {
		e, err := kv.Get(ctx, key)
		var entry Entry
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &entry); err != nil {
				entry = Entry{}
			}
		}
		if entry.First.IsZero() {
			entry.First = now
		}
		// Writes of one key race (consume writes several events' at once):
		// Last never goes back.
		if now.After(entry.Last) {
			entry.Last = now
		}
		if source != "" && !slices.Contains(entry.Sources, source) {
			entry.Sources = append(entry.Sources, source)
			if maxSources > 0 && len(entry.Sources) > maxSources {
				entry.Sources = entry.Sources[len(entry.Sources)-maxSources:]
			}
		}
		raw, _ := json.Marshal(entry)
		if rev == 0 {
			_, err = kv.Create(ctx, key, raw)
		} else {
			_, err = kv.Update(ctx, key, raw, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return err
		}
	}
	return fmt.Errorf("queueing %s: too many concurrent writers", key)
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Queue is a runtime's queue as its controller sees it while leading: a way
// to queue keys besides events (work a previous leader left, say).
type Queue struct {
	kv         jetstream.KeyValue
	clock      Clock
	maxSources int
}

// Add queues key because of source.
func (q *Queue) Add(ctx context.Context, key, source string) error {
	return q.addAt(ctx, key, source, q.clock.Now())
}

// addAt queues key because of a source seen at: the time the consumer took
// its event, so that writes made several at a time keep the events' order
// in the entries' First and Last.
func (q *Queue) addAt(ctx context.Context, key, source string, at time.Time) error {
	return Enqueue(ctx, q.kv, key, source, at, q.maxSources)
}
