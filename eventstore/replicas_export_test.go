package eventstore

import "context"

// Beat beats once and reads everyone's heartbeats, as Run does each interval.
func (r *Replicas) Beat(ctx context.Context) error { return r.beat(ctx) }
