package controllertest

import (
	"context"
	"sync"
	"testing"
)

// Start runs run (a controller's or a cache's Run) in a goroutine until
// the stop it returns is called, or the test ends, and fails the test when
// Run ends with an error. stop waits for Run to return, so a test can start
// a successor on the same store (a restart) knowing the first has stopped;
// it is safe to call more than once.
func Start(t testing.TB, ctx context.Context, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run ended with: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
