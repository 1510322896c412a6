package eventstore

// The data's format record: which releases may open the data at all. A
// release older than the data's lowest reader would decode records it does
// not know leniently and, rewriting them, drop what it did not understand;
// it refuses to start instead (docs/operations.md, "Versions and
// compatibility").

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/Masterminds/semver/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MetaBucket holds records about the data itself rather than about what it
// describes; its key "format" is the Format.
const MetaBucket = "rezus-meta"

const formatKey = "format"

// Format says which releases read the data: the lowest one able to, and
// the one that last opened it. Data without the record was written by a
// release before 0.2.0, which every release reads.
type Format struct {
	// MinReader is the lowest release that reads everything the data may
	// hold (a semantic version, no "v"). It only ever rises.
	MinReader string `json:"minReader"`
	// WrittenBy is the release that last started on the data.
	WrittenBy string `json:"writtenBy"`
}

// TooNewError is the refusal of a release older than the data's MinReader.
type TooNewError struct {
	// Running is the refused release.
	Running string
	// Format is the data's record.
	Format Format
}

func (e *TooNewError) Error() string {
	return fmt.Sprintf("this data needs RezusCloud %s or later (it was last written by %s); run that version, "+
		"or restore a backup taken before the upgrade", e.Format.MinReader, e.Format.WrittenBy)
}

// CheckFormat decides whether release running may open data whose format
// record is f (nil: there is none, so a release before 0.2.0 wrote it):
// nil, a *TooNewError, or an error naming the version that is not one.
func CheckFormat(running string, f *Format) error {
	v, err := semver.NewVersion(running)
	if err != nil {
		return fmt.Errorf("this build's version %q is not a semantic version, so it cannot tell whether it reads this data", running)
	}
	if f == nil {
		return nil
	}
	lowest, err := semver.NewVersion(f.MinReader)
	if err != nil {
		return fmt.Errorf("the data's format record (bucket %s, key %s) names minReader %q, which is not a semantic version", MetaBucket, formatKey, f.MinReader)
	}
	if v.LessThan(lowest) {
		return &TooNewError{Running: running, Format: *f}
	}
	return nil
}

// NextFormat is the record release running, having passed CheckFormat,
// leaves on data recorded as f (nil: none) when it may write records only
// minReader and later releases read: the higher of the two lowest readers,
// and itself as the last writer. Both must be semantic versions.
func NextFormat(running, minReader string, f *Format) Format {
	next := Format{MinReader: semver.MustParse(minReader).String(), WrittenBy: semver.MustParse(running).String()}
	if f != nil && semver.MustParse(f.MinReader).GreaterThan(semver.MustParse(next.MinReader)) {
		next.MinReader = f.MinReader
	}
	return next
}

// FormatRecord reads and writes the data's format record.
type FormatRecord struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

// OpenFormat provisions the meta bucket.
func OpenFormat(ctx context.Context, s *Store) (*FormatRecord, error) {
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: MetaBucket, Description: "about the data itself: which releases read it", History: 10,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", MetaBucket, err)
	}
	return &FormatRecord{nc: s.nc, kv: kv}, nil
}

// Get returns the record (nil when there is none) and its revision (0 then).
// It is the stream leader's: a replica that has not applied the last write
// must not let an old release past the guard.
func (r *FormatRecord) Get(ctx context.Context) (*Format, uint64, error) {
	m, err := leaderLastMsg(ctx, r.nc, "KV_"+MetaBucket, "$KV."+MetaBucket+"."+formatKey)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the data's format record: %w", err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, m.Sequence, nil
	}
	var f Format
	if err := json.Unmarshal(m.Data, &f); err != nil {
		return nil, 0, fmt.Errorf("decoding the data's format record: %w", err)
	}
	return &f, m.Sequence, nil
}

// Open checks that release running may open the data (CheckFormat) and
// records it as the last writer, raising the lowest reader to minReader.
// Replicas starting together each write on the revision they read, so
// the lowest reader never goes down.
func (r *FormatRecord) Open(ctx context.Context, running, minReader string) (Format, error) {
	for {
		f, rev, err := r.Get(ctx)
		if err != nil {
			return Format{}, err
		}
		if err := CheckFormat(running, f); err != nil {
			return Format{}, err
		}
		if _, err := semver.NewVersion(minReader); err != nil {
			return Format{}, fmt.Errorf("lowest reader %q is not a semantic version", minReader)
		}
		next := NextFormat(running, minReader, f)
		if f != nil && *f == next {
			return next, nil
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return Format{}, err
		}
		if rev == 0 {
			_, err = r.kv.Create(ctx, formatKey, raw)
		} else {
			_, err = r.kv.Update(ctx, formatKey, raw, rev)
		}
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, jetstream.ErrKeyExists), isWrongLastSequence(err):
			continue // another replica wrote first: decide again on its record
		default:
			return Format{}, fmt.Errorf("writing the data's format record: %w", err)
		}
	}
}
