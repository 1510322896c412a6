package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// DefaultShutdownGrace bounds a lame-duck shutdown (--shutdown-grace).
const DefaultShutdownGrace = 30 * time.Second

// shutdown takes the replica out of service as a lame duck, so that a
// rolling upgrade loses nothing and tells no client anything it cannot
// retry. In order, within cfg.ShutdownGrace:
//
//  1. /readyz answers 503 ("lame duck"): balancers send new requests to
//     other replicas, and this one still serves what reaches it;
//  2. the leased workers stop and release their leases: a controller's or
//     saga's current step is cancelled at a point it resumes from (every
//     step is safe to run twice), an apply is interrupted as at a crash, and
//     the other replicas take the leases at once instead of after their TTL;
//  3. every watch ends with a BOOKMARK of the version it reached, so its
//     client resumes from there on another replica and misses nothing;
//  4. in-flight requests finish, and the audit log is flushed;
//  5. the remaining workers (read model, PKI, emulator) stop;
//  6. the embedded NATS node, when it is one of a cluster, stops in NATS's
//     lame duck mode, handing its stream and consumer leaderships over.
//
// A step still running at the deadline is cut short, and the steps after it
// run with what time is left (NATS gets at least a few seconds).
func (s *serveRun) shutdown(g *errgroup.Group, stopWork func()) error {
	log := s.log
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	log.Info("lame duck: not ready, handing over leases", "grace", s.cfg.ShutdownGrace)
	s.api.LameDuck()
	s.stopLeases()
	if !waitCtx(ctx, &s.leased) {
		log.Warn("lame duck: leased workers still running at the grace's end")
	}
	log.Info("lame duck: leases released; ending watches", "took", time.Since(start).Round(time.Millisecond))
	s.api.StopWatches()
	s.ui.Close()
	if err := s.srv.Shutdown(ctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	s.stopSampler()
	<-s.samplerDone
	if err := s.audit.Close(ctx); err != nil {
		log.Warn("audit log flush", "err", err)
	}
	stopWork()
	var err error
	if werr := g.Wait(); werr != nil && !errors.Is(werr, context.Canceled) {
		err = werr
	}
	log.Info("lame duck: requests finished; stopping NATS", "took", time.Since(start).Round(time.Millisecond))
	natsCtx, cancelNATS := context.WithTimeout(context.Background(), max(time.Until(start.Add(s.cfg.ShutdownGrace)), 5*time.Second))
	defer cancelNATS()
	s.closeNATS(natsCtx)
	log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
	return err
}

// waitCtx waits for wg or ctx, and reports whether wg was done.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
