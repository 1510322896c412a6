package main

import (
	"context"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// levelReaders are, for each storage schema level, the first release that
// reads it (domain.SchemaLevel's list). A level added to domain needs its
// row here (TestLevelReaders).
var levelReaders = map[int]string{
	1: "0.1.0",
	2: "0.2.0",
}

// formatLevel is the schema level this server may write from its start: a
// single server writes its own level at once; the replicas of a cluster
// write the lowest level they all read (domain.SchemaLevel is raised when
// every replica runs a release that reads it), so the data's lowest reader
// is raised then, not now: a replica of the previous release must still be
// able to restart while the others are replaced.
func formatLevel(cfg serveConfig) int {
	if cfg.NATSURL != "" || cfg.Cluster.Listen != "" {
		return domain.MinSchemaLevel
	}
	return domain.SchemaLevel
}

// checkFormat refuses data a newer release wrote that this one may not
// read (the data's format record names the lowest release that reads it),
// and records this release as the data's last writer, before anything is
// written. The refusal is the error serve exits with.
func (s *serveRun) checkFormat(ctx context.Context) error {
	level := formatLevel(s.cfg)
	reader, ok := levelReaders[level]
	if !ok {
		return fmt.Errorf("no release is known to read schema level %d: add it to levelReaders", level)
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
