//go:build e2e || browser

package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// Helpers shared by the end-to-end tests (tag e2e) and the browser tests (tag
// browser): both run a real server with the Talos emulator and tofu.

func startInfraServer(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	tofu, mirror := tofutest.Tools(t)
	args := append([]string{"--with-emulator", "--tofu", tofu, "--provider-mirror", mirror,
		"--apply-debounce", "1500ms", "--resync", "0"}, extra...)
	p := startServer(t, dataDir, args...)
	p.eventually(60*time.Second, "the emulated provider is registered", func() bool {
		code, _ := p.do("GET", "/api/v1/providers/emulated", "")
		return code == http.StatusOK
	})
	return p
}

func (p *proc) eventually(d time.Duration, what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
