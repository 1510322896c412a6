package configsync_test

import (
	"fmt"
	"testing"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
)

// BenchmarkConfigPatchTo50Machines measures the time from a ConfigPatch
// write to all of 50 emulated machines (3 control planes, 47 workers)
// holding their new config, as the emulator reports it, with the books
// agreeing: the controller's defaults (debounce included) but its Talos
// API calls, over real mTLS to the in-process emulator. The patch changes
// the kubelet's arguments, which Talos applies in place.
//
//	go test -run '^$' -bench ConfigPatchTo50 -benchtime 3x ./controllers/configsync/
func BenchmarkConfigPatchTo50Machines(b *testing.B) {
	for _, parallelism := range []int{1, 10} {
		b.Run(fmt.Sprintf("maxParallelism=%d", parallelism), func(b *testing.B) {
			e := newEnv(b, 3, 47, parallelism)
			// The production defaults (a 200 ms debounce among them).
			e.start(func(c *configsync.Config) {
				*c = configsync.Config{Store: c.Store, Cache: c.Cache, Talos: c.Talos, Holder: c.Holder, Nodes: c.Nodes, Log: c.Log}
			})
			e.waitConverged("the first pass")
			b.ResetTimer()
			for i := range b.N {
				before := e.nodeHashes()
				e.patch("verbose-kubelet", fmt.Sprintf("machine:\n  kubelet:\n    extraArgs:\n      v: \"%d\"\n", i+2), true)
				e.eventuallyAllChanged(before, "the patch")
				e.waitConverged("the patch")
			}
		})
	}
}
