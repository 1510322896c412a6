package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// levelReaders are, for each storage schema level, the first release that
// reads it (domain.SchemaLevel's list). A level added to domain needs its
// row here (TestLevelReaders).
var levelReaders = map[int]string{
	1: "0.1.0",
	2: "0.2.0",
}

// formatFollowInterval is how often followFormat looks at the write level:
// the heartbeats' interval, which is how often it can change.
const formatFollowInterval = 5 * time.Second

// readerOf is the first release that reads level.
func readerOf(level int) (string, error) {
	r, ok := levelReaders[level]
	if !ok {
		return "", fmt.Errorf("no release is known to read schema level %d: add it to levelReaders", level)
	}
	return r, nil
}

// checkFormat refuses data a newer release wrote that this one may not
// read (the data's format record names the lowest release that reads it),
// and records this release as the data's last writer, before anything is
// written. The lowest reader becomes that of the level the store writes
// (the level every running replica reads, from the heartbeats): at once
// on a single server, later in a rolling upgrade (followFormat), so that a
// replica of the previous release may still restart while the others are
// replaced. The refusal is the error serve exits with.
func (s *serveRun) checkFormat(ctx context.Context) error {
	reader, err := readerOf(s.replicas.WriteLevel())
	if err != nil {
		return err
	}
	return untilProvisioned(ctx, s.log, s.emb, s.starting, func() error {
		rec, err := eventstore.OpenFormat(ctx, s.store)
		if err != nil {
			return err
		}
		f, err := rec.Open(ctx, build().Version, reader)
		if err != nil {
			return err
		}
		s.format = rec
		s.log.Info("data format", "minReader", f.MinReader, "writtenBy", f.WrittenBy)
		return nil
	})
}

// followFormat raises the data's lowest reader when the write level rises
// (the last replica of the previous release is gone): from then on records
// only the new release reads may exist.
func (s *serveRun) followFormat(ctx context.Context) error {
	written := s.replicas.WriteLevel()
	t := time.NewTicker(formatFollowInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		level := s.replicas.WriteLevel()
		if level <= written {
			continue
		}
		reader, err := readerOf(level)
		if err != nil {
			return err
		}
		f, err := s.format.Open(ctx, build().Version, reader)
		var tooNew *eventstore.TooNewError
		switch {
		case errors.As(err, &tooNew):
			// A newer release raised it past this one: this replica is the
			// old one of a rolling upgrade and is about to be replaced.
			s.log.Warn("data format: a newer release writes this data", "err", err)
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.log.Warn("data format: raising the lowest reader", "level", level, "err", err)
			continue
		default:
			s.log.Info("data format", "minReader", f.MinReader, "writtenBy", f.WrittenBy, "level", level)
		}
		written = level
	}
}
