// Package leaktest fails a package's tests when a goroutine or a process
// outlives them: goroutines through go.uber.org/goleak, with the few of
// libraries that are known to stay and hold nothing of ours let be;
// processes through the marks of internal/proctree (everything the test
// binary starts, and what that starts, carries its pid). Every package whose
// code starts goroutines or processes calls VerifyTestMain from its TestMain.
package leaktest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rezuscloud/rezuscloud/internal/proctree"
)

// known are goroutines of libraries that outlive their owner by design or
// by a bug of theirs, each with why it may.
var known = []goleak.Option{
	// nats.go v1.55.0: an async publish on a connection that is closing
	// starts resetPendingAcksOnReconnect with the nil channel StatusChanged
	// answers for a closed connection, and it waits on it forever
	// (jetstream/publish.go:449-451). One per JetStream context at most.
	goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	// nats-server v2.15.2: a stream's file store created while its server
	// shuts down is not stopped with it, and its state-flush loop and the
	// access-time service it registered stay (seen once in handlers' tests,
	// 2026-12-04, not found which test races so). A server left running
	// whole would still be found by its other goroutines.
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	// klog's flush daemon, started by importing client-go; it lives for the
	// process by design.
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
}

// VerifyTestMain runs the tests, then fails if goroutines other than the
// known ones, or processes the tests started, are left.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	VerifyTestMainAfter(m, nil, opts...)
}

// VerifyTestMainAfter is VerifyTestMain for a TestMain that keeps something
// for all its tests (a shared apiserver, a built binary): release, when not
// nil, ends it after the tests and before the checks.
func VerifyTestMainAfter(m *testing.M, release func(), opts ...goleak.Option) {
	proctree.MarkRoot()
	code := m.Run()
	if release != nil {
		release()
	}
	if code == 0 {
		if err := findGoroutines(append(append([]goleak.Option(nil), known...), opts...), 10*time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "leaktest: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	if LeftoverProcesses() {
		code = 1
	}
	os.Exit(code)
}

// findGoroutines is goleak.Find given up to wait: goleak retries for about
// half a second, and on two loaded cores a handler finishing its last write
// after a test closed its server can take longer than that to end.
func findGoroutines(opts []goleak.Option, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	err := goleak.Find(opts...)
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // goroutines ending on their own: nothing to wait on
		err = goleak.Find(opts...)
	}
	return err
}

// LeftoverProcesses reports, and ends, the processes this test binary's tree
// still holds (servers, tofu, provider plugins, etcd, kube-apiserver …)
// once they have had 10 s to go: a test binary whose children outlive it is
// what left provider plugins running under init after CI.
func LeftoverProcesses() bool {
	deadline := time.Now().Add(10 * time.Second)
	left := proctree.Descendants(os.Getpid())
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // they are dying or not: there is nothing to wait on
		left = proctree.Descendants(os.Getpid())
	}
	if len(left) == 0 {
		return false
	}
	fmt.Fprintf(os.Stderr, "leaktest: processes outlived the tests (now killed):\n")
	for _, p := range left {
		fmt.Fprintf(os.Stderr, "  %s\n", p)
	}
	proctree.Kill(left)
	return true
}
