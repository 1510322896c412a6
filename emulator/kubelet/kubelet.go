package kubelet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kubelet is the emulated kubelet of one node, for one boot: a reboot makes a
// new one.
type Kubelet struct {
	cfg Config
	ips *ipam

	// node is the Node as last read or written: its UID (owner of the Lease
	// and mirror pods) and spec.podCIDR.
	node atomic.Pointer[corev1.Node]

	mu       sync.Mutex
	started  bool
	shutdown bool
	cancel   context.CancelFunc
	done     chan struct{} // closed when Run's goroutines are gone
}

// New validates cfg and returns a Kubelet to Run.
func New(cfg Config) (*Kubelet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubelet config: %w", err)
	}
	cfg.setDefaults()
	return &Kubelet{cfg: cfg, ips: newIPAM(fallbackPodCIDR(cfg.NodeName))}, nil
}

// Run registers the Node, then keeps its Lease and status fresh and runs the
// pods bound to it, until ctx ends or Shutdown. API errors are logged and
// retried, never returned: a kubelet outlives its apiserver's restarts. It
// returns an error only when called twice.
func (k *Kubelet) Run(ctx context.Context) error {
	k.mu.Lock()
	if k.started {
		k.mu.Unlock()
		return errors.New("kubelet: Run called twice")
	}
	k.started = true
	if k.shutdown {
		k.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	k.cancel, k.done = cancel, make(chan struct{})
	k.mu.Unlock()
	defer close(k.done)
	defer cancel()

	if !k.register(ctx) {
		return nil
	}
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){k.renewLease, k.heartbeat, k.runPods} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	wg.Wait()
	return nil
}

// Shutdown is the machine going down (a reboot or a shutdown): the kubelet
// stops, then posts Ready=False, "node is shutting down". Run returns. The
// pods stay bound, as on a real node, until the node lifecycle controller
// evicts them or the node comes back.
func (k *Kubelet) Shutdown(ctx context.Context) {
	k.mu.Lock()
	k.shutdown = true
	cancel, done := k.cancel, k.done
	k.mu.Unlock()
	if cancel != nil {
		// Stop first, so no heartbeat posts Ready=True after NotReady.
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
	if err := k.postStatus(ctx, false); err != nil {
		k.cfg.Logf("posting NotReady at shutdown: %v", err)
	}
}

// every runs f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// sleep waits d, reporting false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
