package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

// editorScript writes an EDITOR that applies a sed expression to the file.
func editorScript(t *testing.T, sed string) string {
	p := filepath.Join(t.TempDir(), "editor.sh")
	require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf("#!/bin/sh\nsed %q \"$1\" > \"$1.new\" && mv \"$1.new\" \"$1\"\n", sed)), 0o755))
	return p
}

var keptFile = regexp.MustCompile(`your edits are in (\S+)`)

func TestEdit(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme/nodegroups/workers", obj("NodeGroup", "acme", "workers", tcNow, `{"role":"worker","count":2,"provider":"emu"}`, "", nil))
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	tc.env["EDITOR"] = editorScript(t, "s/count: 2/count: 4/")
	assert.Equal(t, "nodegroup/workers edited\n", tc.ok("edit", "ng", "workers"))
	var put domain.Object
	require.NoError(t, json.Unmarshal(f.body("PUT /api/v1/tenants/acme/nodegroups/workers"), &put))
	assert.JSONEq(t, `{"role":"worker","count":4,"provider":"emu"}`, string(put.Spec))
	assert.Equal(t, "1", put.Metadata.ResourceVersion, "saved at the version read")

	// A rejected edit keeps the file and says where it is.
	f.handle("PUT /api/v1/tenants/acme/nodegroups/workers", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, domain.NewInvalid("NodeGroup", "workers", []domain.Cause{{Field: "spec.count", Message: "must be between 0 and 1000, got -1"}}))
	})
	tc.env["EDITOR"] = editorScript(t, "s/count: 4/count: -1/")
	r := tc.run("edit", "ng", "workers")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "Error from server (Invalid): nodegroup \"workers\" is invalid: spec.count: must be between 0 and 1000, got -1\n  spec.count: must be between 0 and 1000, got -1\n")
	m := keptFile.FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	b, err := os.ReadFile(m[1])
	require.NoError(t, err)
	assert.Contains(t, string(b), "count: -1")
	os.Remove(m[1])

	// Renaming is not editing.
	tc.env["EDITOR"] = editorScript(t, "s/name: workers/name: other/")
	r = tc.run("edit", "ng", "workers")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "kind, metadata.name and metadata.tenant cannot be changed by edit")

	// YAML that does not parse keeps the file too.
	tc.env["EDITOR"] = editorScript(t, "s/role: worker/role: [/")
	r = tc.run("edit", "ng", "workers")
	assert.Equal(t, 1, r.code)
	m = keptFile.FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	os.Remove(m[1])

	tc.env["EDITOR"] = "false"
	r = tc.run("edit", "ng", "workers")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `editor "false" failed`)
}

func TestCompletionAndVersion(t *testing.T) {
	tc := newTestCLI(t)
	bash := tc.ok("completion", "bash")
	assert.Contains(t, bash, "complete -o bashdefault -o default -o nospace -F _rezusctl_bash_autocomplete rezusctl\n")
	assert.Contains(t, tc.ok("completion", "zsh"), "compdef _rezusctl_zsh_autocomplete rezusctl\n")
	assert.Equal(t, 1, tc.run("completion", "tcsh").code)

	assert.Contains(t, tc.ok("get", "--generate-bash-completion"), "nodegroups\n")
	// (Completing command names is urfave/cli's own, and it reads os.Args:
	// not testable in-process.)
	tc.ok("config", "set-context", "lab")
	assert.Equal(t, "lab\n", tc.ok("config", "use-context", "--generate-bash-completion"))

	assert.Regexp(t, `^Client Version: `+regexp.QuoteMeta(buildinfo.Version())+` \(commit \S+, built \S+, go[0-9.]+.*\)\n$`, tc.ok("version", "--client"))
}
