package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

// TestVersionClient: an unstamped client is the release VERSION says, not
// "dev" (TestEndToEnd checks the server's answer beside it).
func TestVersionClient(t *testing.T) {
	out := newTestCLI(t).ok("version", "--client")
	assert.Regexp(t, `^Client Version: `+regexp.QuoteMeta(buildinfo.Version())+` \(commit \S+, built \S+, go\S+\)\n$`, out)
	assert.NotContains(t, out, "dev")
}
