package handlers_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// tofuRun runs the real tofu in a work dir with a clean environment, the way
// the runner does: credentials and encryption by environment only.
type tofuRun struct {
	t    *testing.T
	bin  string
	dir  string
	base []string
}

func (r *tofuRun) run(extraEnv []string, args ...string) (string, error) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Dir = r.dir
	cmd.Env = append(append([]string{}, r.base...), extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (r *tofuRun) mustRun(extraEnv []string, args ...string) string {
	r.t.Helper()
	out, err := r.run(extraEnv, args...)
	require.NoError(r.t, err, "tofu %s:\n%s", strings.Join(args, " "), out)
	return out
}

// TestStateBackendWithTofu drives the backend with OpenTofu's own http
// backend: apply stores state, a held lock stops an apply and is named in
// its error, force-unlock frees it, and with TF_ENCRYPTION a plain state
// migrates to one that shows none of its values.
func TestStateBackendWithTofu(t *testing.T) {
	bin, _ := tofutest.Tools(t)
	s := newStateStack(t)
	ctx := context.Background()
	user, pass := s.creds("acme", "apply-tofu")

	dir := t.TempDir()
	cliConfig := filepath.Join(dir, "tofurc")
	require.NoError(t, os.WriteFile(cliConfig, nil, 0o600)) // terraform_data needs no provider
	work := filepath.Join(dir, "work")
	require.NoError(t, os.MkdirAll(work, 0o700))
	base := s.srv.URL + "/tfstate/acme"
	require.NoError(t, os.WriteFile(filepath.Join(work, "main.tf"), []byte(`
terraform {
  backend "http" {
    address        = "`+base+`"
    lock_address   = "`+base+`/lock"
    unlock_address = "`+base+`/lock"
    retry_max      = 0
  }
}

variable "marker" {
  type = string
}

resource "terraform_data" "x" {
  input = var.marker
}
`), 0o600))
	tf := &tofuRun{t: t, bin: bin, dir: work, base: []string{
		"PATH=/usr/bin:/bin", "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + cliConfig,
		"TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
		"TF_HTTP_USERNAME=" + user, "TF_HTTP_PASSWORD=" + pass,
	}}

	tf.mustRun(nil, "init", "-input=false", "-no-color")
	tf.mustRun([]string{"TF_VAR_marker=plain-marker-1"}, "apply", "-auto-approve", "-input=false", "-no-color")
	st, err := s.state.Get(ctx, "acme")
	require.NoError(t, err)
	require.Contains(t, string(st.Data), "plain-marker-1", "apply stored the state")
	require.Contains(t, string(st.Data), `"terraform_data"`)
	require.False(t, st.Version.Encrypted)
	_, _, locked, err := s.state.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.False(t, locked, "tofu released its lock")
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil)
	require.Equal(t, http.StatusOK, r.Code)
	require.Equal(t, st.Data, r.Body, "users see what tofu stored")

	// Another apply holds the lock: this one fails and says who holds it,
	// without the lock's ID.
	hu, hp := s.creds("acme", "apply-holder")
	require.Equal(t, http.StatusOK, s.do("LOCK", "/tfstate/acme/lock", lockBody("lock-held-by-other", "holder@elsewhere"), basic(hu, hp)...).Code)
	out, err := tf.run([]string{"TF_VAR_marker=plain-marker-2"}, "apply", "-auto-approve", "-input=false", "-no-color", "-lock-timeout=0s")
	require.Error(t, err, out)
	require.Contains(t, out, "Error acquiring the state lock", out)
	require.Contains(t, out, "holder@elsewhere", "the error says who holds it")
	require.NotContains(t, out, "lock-held-by-other", "but not the lock's ID")
	st2, err := s.state.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, st.Version.Revision, st2.Version.Revision, "the refused apply wrote nothing")

	// tofu force-unlock with this apply's credentials cannot free another
	// apply's lock, even with its ID; an admin's force-unlock does.
	out, err = tf.run(nil, "force-unlock", "-force", "-no-color", "lock-held-by-other")
	require.Error(t, err, out)
	_, _, locked, err = s.state.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.True(t, locked, "the lock is still held")
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/tenants/acme/state/lock", nil).Code)
	_, _, locked, err = s.state.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.False(t, locked)

	// With a passphrase: the plain state migrates, and the stored blob holds
	// none of the state's values.
	enc, err := tofu.EncryptionConfig(`a "long" passphrase with ${no} interpolation`)
	require.NoError(t, err)
	encEnv := []string{"TF_ENCRYPTION=" + enc, "TF_VAR_marker=secret-marker-3"}
	tf.mustRun(encEnv, "apply", "-auto-approve", "-input=false", "-no-color")
	st3, err := s.state.Get(ctx, "acme")
	require.NoError(t, err)
	require.True(t, st3.Version.Encrypted, "the state was rewritten encrypted")
	for _, plain := range []string{"secret-marker-3", "plain-marker-1", "terraform_data", `"resources"`, `"instances"`} {
		require.NotContains(t, string(st3.Data), plain, "no plaintext in the stored blob")
	}
	require.Greater(t, st3.Version.Serial, st.Version.Serial)
	require.Equal(t, st.Version.Lineage, st3.Version.Lineage, "the same state, migrated")

	// Tofu reads it back with the passphrase (no change to make) and not without.
	out = tf.mustRun(encEnv, "plan", "-input=false", "-no-color", "-detailed-exitcode")
	require.Contains(t, out, "No changes")
	pulled := tf.mustRun([]string{"TF_ENCRYPTION=" + enc}, "state", "pull")
	require.Contains(t, pulled, "secret-marker-3")
	out, err = tf.run([]string{"TF_VAR_marker=secret-marker-3"}, "plan", "-input=false", "-no-color")
	require.Error(t, err, "without the passphrase the state cannot be read:\n%s", out)
	wrong, err := tofu.EncryptionConfig("another passphrase, just as long")
	require.NoError(t, err)
	out, err = tf.run([]string{"TF_ENCRYPTION=" + wrong, "TF_VAR_marker=secret-marker-3"}, "plan", "-input=false", "-no-color")
	require.Error(t, err, "with the wrong passphrase the state cannot be read:\n%s", out)
}

// tofuWork writes a tofu configuration with the http backend of tenant on
// the stack's server (or, with no stack, the local backend) and returns a
// runner for it with apply credentials of applyID.
func tofuWork(t *testing.T, bin string, s *stateStack, tenant, applyID string) *tofuRun {
	t.Helper()
	dir := t.TempDir()
	cliConfig := filepath.Join(dir, "tofurc")
	require.NoError(t, os.WriteFile(cliConfig, nil, 0o600)) // terraform_data needs no provider
	work := filepath.Join(dir, "work")
	require.NoError(t, os.MkdirAll(work, 0o700))
	backend := ""
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + cliConfig,
		"TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1"}
	if s != nil {
		base := s.srv.URL + "/tfstate/" + tenant
		backend = `
terraform {
  backend "http" {
    address        = "` + base + `"
    lock_address   = "` + base + `/lock"
    unlock_address = "` + base + `/lock"
    retry_max      = 0
  }
}
`
		user, pass := s.creds(tenant, applyID)
		env = append(env, "TF_HTTP_USERNAME="+user, "TF_HTTP_PASSWORD="+pass)
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, "main.tf"), []byte(backend+`
variable "marker" {
  type = string
}

resource "terraform_data" "x" {
  input = var.marker
}
`), 0o600))
	return &tofuRun{t: t, bin: bin, dir: work, base: env}
}

// TestStateAlwaysEncryptedWithTofu: without a state passphrase, tofu given
// the tenant's generated key (what the runner passes as TF_ENCRYPTION) stores
// only encrypted state, on a server that refuses plain state as `serve`
// does; and state stored plain before there were keys migrates on the next
// apply. The stored blobs hold none of the state's values.
func TestStateAlwaysEncryptedWithTofu(t *testing.T) {
	bin, _ := tofutest.Tools(t)
	s := newStateStack(t, func(c *handlers.Config) { c.RequireEncryptedState = true })
	ctx := context.Background()
	plain, err := eventstore.OpenSecrets(ctx, s.env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	keys := eventstore.NewStateKeys(sealed)
	encryption := func(tenant string) string {
		key, err := keys.StateKey(ctx, tenant)
		require.NoError(t, err)
		enc, err := tofu.KeyEncryptionConfig(key)
		require.NoError(t, err)
		return "TF_ENCRYPTION=" + enc
	}
	const pem = "-----BEGIN EC PRIVATE KEY-----MHcCAQEEIG-----END EC PRIVATE KEY-----"
	requireSealed := func(t *testing.T, st *eventstore.State, markers ...string) {
		t.Helper()
		require.True(t, st.Version.Encrypted, "stored encrypted")
		require.Contains(t, string(st.Data), `"encrypted_data"`)
		for _, m := range append(markers, "-----BEGIN", "terraform_data", `"resources"`, `"instances"`) {
			require.NotContains(t, string(st.Data), m, "no plaintext in the stored blob")
		}
	}

	t.Run("a new tenant's state is encrypted", func(t *testing.T) {
		tf := tofuWork(t, bin, s, "acme", "apply-new")
		enc := encryption("acme")
		tf.mustRun([]string{enc}, "init", "-input=false", "-no-color")
		tf.mustRun([]string{enc, "TF_VAR_marker=" + pem + "new-1"}, "apply", "-auto-approve", "-input=false", "-no-color")
		st, err := s.state.Get(ctx, "acme")
		require.NoError(t, err)
		requireSealed(t, st, "new-1")
		// The next apply (same key: it is stable) reads it and changes nothing.
		out := tf.mustRun([]string{encryption("acme"), "TF_VAR_marker=" + pem + "new-1"}, "plan", "-input=false", "-no-color", "-detailed-exitcode")
		require.Contains(t, out, "No changes")
		// Another tenant's key does not open it.
		out, err = tf.run([]string{encryption("globex"), "TF_VAR_marker=" + pem + "new-1"}, "plan", "-input=false", "-no-color")
		require.Error(t, err, "another tenant's key cannot read the state:\n%s", out)
		// Without the key tofu can neither read it nor store plain state over it.
		out, err = tf.run([]string{"TF_VAR_marker=plain"}, "apply", "-auto-approve", "-input=false", "-no-color")
		require.Error(t, err, out)
		st2, err := s.state.Get(ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, st.Version.Revision, st2.Version.Revision, "nothing plain was stored")
	})

	t.Run("state written under the earlier key derivation reads under today's", func(t *testing.T) {
		// Before issue 49 a tenant's key went through OpenTofu's default
		// PBKDF2 (600,000 rounds of SHA-512); the state records it, so the
		// cheaper derivation of today decrypts it and rewrites it.
		key, err := keys.StateKey(ctx, "initech")
		require.NoError(t, err)
		before, err := tofu.EncryptionConfig(hex.EncodeToString(key))
		require.NoError(t, err)
		tf := tofuWork(t, bin, s, "initech", "apply-old-kdf")
		tf.mustRun([]string{"TF_ENCRYPTION=" + before}, "init", "-input=false", "-no-color")
		tf.mustRun([]string{"TF_ENCRYPTION=" + before, "TF_VAR_marker=" + pem + "kdf-1"}, "apply", "-auto-approve", "-input=false", "-no-color")
		old, err := s.state.Get(ctx, "initech")
		require.NoError(t, err)
		requireSealed(t, old, "kdf-1")
		require.Equal(t, 600000, kdfIterations(t, old.Data))
		out := tf.mustRun([]string{encryption("initech"), "TF_VAR_marker=" + pem + "kdf-2"}, "apply", "-auto-approve", "-input=false", "-no-color")
		require.Contains(t, out, "Apply complete")
		now, err := s.state.Get(ctx, "initech")
		require.NoError(t, err)
		requireSealed(t, now, "kdf-1", "kdf-2")
		require.Equal(t, 200000, kdfIterations(t, now.Data))
	})

	t.Run("plain state migrates on the next apply", func(t *testing.T) {
		// State from before keys: written plain (here with the local
		// backend) and stored as it was.
		local := tofuWork(t, bin, nil, "", "")
		local.mustRun(nil, "init", "-input=false", "-no-color")
		local.mustRun([]string{"TF_VAR_marker=" + pem + "old-2"}, "apply", "-auto-approve", "-input=false", "-no-color")
		old, err := os.ReadFile(filepath.Join(local.dir, "terraform.tfstate"))
		require.NoError(t, err)
		require.Contains(t, string(old), "old-2")
		before, err := s.state.Put(ctx, "globex", "", eventstore.LockOwner{}, old)
		require.NoError(t, err)
		require.False(t, before.Encrypted)

		tf := tofuWork(t, bin, s, "globex", "apply-migrate")
		enc := encryption("globex")
		tf.mustRun([]string{enc}, "init", "-input=false", "-no-color")
		tf.mustRun([]string{enc, "TF_VAR_marker=" + pem + "new-2"}, "apply", "-auto-approve", "-input=false", "-no-color")
		st, err := s.state.Get(ctx, "globex")
		require.NoError(t, err)
		requireSealed(t, st, "old-2", "new-2")
		require.Equal(t, before.Lineage, st.Version.Lineage, "the same state, migrated")
		require.Greater(t, st.Version.Serial, before.Serial)
		pulled := tf.mustRun([]string{enc}, "state", "pull")
		require.Contains(t, pulled, "new-2", "tofu reads it back with the key")
	})
}

// kdfIterations is the PBKDF2 iteration count an encrypted state records
// (its key provider's metadata: JSON, base64 in the state's "meta").
func kdfIterations(t *testing.T, state []byte) int {
	t.Helper()
	var st struct {
		Meta map[string][]byte `json:"meta"`
	}
	require.NoError(t, json.Unmarshal(state, &st))
	var m struct {
		Iterations int `json:"iterations"`
	}
	require.NoError(t, json.Unmarshal(st.Meta["key_provider.pbkdf2.rezus"], &m), "%s", state)
	return m.Iterations
}
