package eventstore

import "context"

// LameDuck stops a cluster node the way NATS upgrades one server at a time:
// in lame duck mode it hands the leadership of every stream, consumer and
// the meta group it leads to another node and waits a moment for it to move,
// then stops JetStream and the server. The other nodes need not wait for an
// election timeout before they answer again. A single server has nobody to
// hand over to and stops as Shutdown does. Either way it returns once the
// server has stopped or ctx has ended; call it after closing the
// application's connections, which lame duck mode would otherwise close
// one by one over its duration.
func (e *Embedded) LameDuck(ctx context.Context) {
	if e.clusterSize > 0 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if e.sys != nil {
				e.sys.Close()
			}
			e.srv.LameDuckShutdown()
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	e.Shutdown(ctx)
}
