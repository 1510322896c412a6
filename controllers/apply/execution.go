package apply

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// execution is one run's use of the tenant's work dir.
type execution struct {
	w    *Worker
	dir  string
	env  []string
	logw *tofu.LogWriter
	// spent is the time spent in tofu so far.
	spent *time.Duration
	// revoke ends the run's state credentials.
	revoke func()
	// cli is the CLI configuration (TF_CLI_CONFIG_FILE's content).
	cli []byte
	// tenant is the tenant the run is of.
	tenant string
}

// tofu runs tofu in the work dir with the run's environment, timing it.
func (x *execution) tofu(ctx context.Context, out io.Writer, args ...string) error {
	start := time.Now()
	err := x.w.cfg.Tofu.Exec(ctx, x.dir, x.env, out, args...)
	*x.spent += time.Since(start)
	return err
}

// prepare makes the work dir and the environment of a run: nothing inherited
// from the server's environment, only what tofu and the providers need.
func (w *Worker) prepare(ctx context.Context, tenant, apply string, logw *tofu.LogWriter, spent *time.Duration) (x *execution, err error) {
	return w.prepareIn(ctx, tenant, apply, w.tenantDir(tenant), true, logw, spent)
}

// prepareIn is prepare in dir; a run that takes the state lock (owns) first
// releases a stale one, a dry run's plan (which takes none) must not.
func (w *Worker) prepareIn(ctx context.Context, tenant, apply, dir string, owns bool, logw *tofu.LogWriter, spent *time.Duration) (x *execution, err error) {
	if _, err := w.cfg.Tofu.Path(); err != nil {
		return nil, err
	}
	home := filepath.Join(w.cfg.WorkDir, "home")
	cache := w.pluginCache()
	for _, d := range []string{dir, home, cache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	cli, err := w.cfg.Tofu.CLIConfig(cache)
	if err != nil {
		return nil, err
	}
	cliPath := filepath.Join(w.cfg.WorkDir, "tofurc")
	if err := writeIfChanged(cliPath, []byte(cli), 0o600); err != nil {
		return nil, err
	}
	if owns {
		if err := w.recoverLock(ctx, tenant, apply, logw); err != nil {
			return nil, err
		}
	}
	user, pass, err := w.cfg.Credentials.IssueStateCredentials(ctx, tenant, apply, w.cfg.Timeout+5*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("issuing state credentials: %w", err)
	}
	revoke := func() { w.revokeCredentials(ctx, tenant, user, pass) }
	defer func() {
		if err != nil {
			revoke()
		}
	}()
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"TMPDIR=" + os.TempDir(),
		"TF_CLI_CONFIG_FILE=" + cliPath,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		"TF_HTTP_USERNAME=" + user,
		"TF_HTTP_PASSWORD=" + pass,
	}
	enc, err := w.encryption(ctx, tenant)
	if err != nil {
		return nil, err
	}
	env = append(env, "TF_ENCRYPTION="+enc)
	creds, err := w.providerEnv(ctx, tenant)
	if err != nil {
		return nil, err
	}
	env = append(env, creds...)
	x = &execution{w: w, dir: dir, env: env, logw: logw, spent: spent, revoke: revoke, cli: []byte(cli), tenant: tenant}
	if err := writeIfChanged(filepath.Join(dir, backendFile), w.backendConfig(tenant), 0o600); err != nil {
		return nil, err
	}
	return x, nil
}

// encryption is the tenant's TF_ENCRYPTION: state is always encrypted, under
// the configured passphrase or else the tenant's generated key.
func (w *Worker) encryption(ctx context.Context, tenant string) (string, error) {
	if w.cfg.StatePassphrase != "" {
		return tofu.EncryptionConfig(w.cfg.StatePassphrase)
	}
	if w.cfg.StateKeys == nil {
		return "", errors.New("state encryption: neither a state passphrase nor a state key store is configured")
	}
	key, err := w.cfg.StateKeys.StateKey(ctx, tenant)
	if err != nil {
		return "", fmt.Errorf("loading the state key: %w", err)
	}
	return tofu.KeyEncryptionConfig(key)
}

// recoverLock releases a state lock that no running apply holds: one
// replica holds the worker lease and runs a tenant's applies one at a time,
// so a lock taken by any other apply's credentials belongs to a dead process.
func (w *Worker) recoverLock(ctx context.Context, tenant, apply string, logw *tofu.LogWriter) error {
	holder, err := w.cfg.State.LockHolderApply(ctx, tenant)
	if err != nil {
		return fmt.Errorf("checking the state lock: %w", err)
	}
	if holder == "" || holder == apply {
		return nil
	}
	logw.Printf("the state lock is held by apply %s, which is not running: releasing it", holder)
	w.cfg.Log.Warn("apply worker: releasing a stale state lock", "tenant", tenant, "holder", holder)
	return w.cfg.State.ForceUnlock(ctx, tenant)
}

func (w *Worker) backendConfig(tenant string) []byte {
	base := strings.TrimSuffix(w.cfg.BackendURL, "/") + "/tfstate/" + tenant
	http := map[string]any{
		"address": base, "lock_address": base + "/lock", "unlock_address": base + "/lock",
		"lock_method": "LOCK", "unlock_method": "UNLOCK", "retry_max": 3,
	}
	if w.cfg.BackendCAPEM != "" {
		http["client_ca_certificate_pem"] = w.cfg.BackendCAPEM
	}
	b, _ := json.MarshalIndent(map[string]any{"terraform": map[string]any{"backend": map[string]any{"http": http}}}, "", "  ")
	return append(b, '\n')
}

func (x *execution) writeConfig(f providers.Files) error {
	if err := x.writeModules(f.Modules); err != nil {
		return err
	}
	if err := writeIfChanged(filepath.Join(x.dir, mainFile), f.Main, 0o600); err != nil {
		return err
	}
	if len(f.Vars) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(x.dir, varsFile), f.Vars, 0o600)
}

// writeModules writes the module providers' files under ModulesDir, one
// directory per Provider, and removes what no module has any more.
func (x *execution) writeModules(mods map[string]map[string]string) error {
	root := filepath.Join(x.dir, providers.ModulesDir)
	if entries, err := os.ReadDir(root); err == nil {
		for _, e := range entries {
			files, ok := mods[e.Name()]
			if !ok || !e.IsDir() {
				if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
					return err
				}
				continue
			}
			inner, _ := os.ReadDir(filepath.Join(root, e.Name()))
			for _, f := range inner {
				if _, keep := files[f.Name()]; !keep {
					if err := os.RemoveAll(filepath.Join(root, e.Name(), f.Name())); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(mods)) {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		for _, fname := range slices.Sorted(maps.Keys(mods[name])) {
			// Names were checked (domain: one directory, .tf or .tf.json).
			if err := writeIfChanged(filepath.Join(dir, filepath.Base(fname)), []byte(mods[name][fname]), 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// cleanup removes the secrets the run wrote and ends its state credentials,
// however the run ended.
func (x *execution) cleanup() {
	_ = os.Remove(filepath.Join(x.dir, varsFile))
	x.revoke()
}

// revokeCredentials ends a run's state credentials; the run's context may be
// over (canceled, timed out), the revoke must still happen.
func (w *Worker) revokeCredentials(ctx context.Context, tenant, user, pass string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := w.cfg.Credentials.RevokeStateCredentials(rctx, user, pass); err != nil {
		w.cfg.Log.Warn("apply worker: revoking the state credentials of a run; they expire with the run's timeout", "tenant", tenant, "err", err)
	}
}

// init runs `tofu init` unless the providers and backend are those of the
// last successful init in this dir.
func (x *execution) init(ctx context.Context, main []byte) error {
	h := sha256.New()
	if main != nil {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(main, &top); err != nil {
			return fmt.Errorf("generator bug: %s is not JSON: %w", mainFile, err)
		}
		h.Write(top["terraform"])
		h.Write(top["provider"])
		// Of the module calls, init installs the sources: their inputs (the
		// machines of a group, a count) are no reason to init again.
		var calls map[string]struct {
			Source  string `json:"source"`
			Version string `json:"version"`
		}
		_ = json.Unmarshal(top["module"], &calls)
		for _, name := range slices.Sorted(maps.Keys(calls)) {
			fmt.Fprintf(h, "module %s %s %s\n", name, calls[name].Source, calls[name].Version)
		}
		// A module's required_providers are installed by init too.
		root := filepath.Join(x.dir, providers.ModulesDir)
		dirs, _ := os.ReadDir(root)
		for _, d := range dirs {
			files, _ := os.ReadDir(filepath.Join(root, d.Name()))
			for _, f := range files {
				b, _ := os.ReadFile(filepath.Join(root, d.Name(), f.Name()))
				fmt.Fprintf(h, "%s/%s %d\n", d.Name(), f.Name(), len(b))
				h.Write(b)
			}
		}
	}
	backend, _ := os.ReadFile(filepath.Join(x.dir, backendFile))
	h.Write(backend)
	for _, kv := range x.env {
		if strings.HasPrefix(kv, "TF_CLI_CONFIG_FILE=") || strings.HasPrefix(kv, "TF_ENCRYPTION=") {
			h.Write([]byte(kv))
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	marker := filepath.Join(x.dir, initHash)
	if old, err := os.ReadFile(marker); err == nil && string(old) == sum {
		if _, err := os.Stat(filepath.Join(x.dir, ".terraform")); err == nil {
			return nil
		}
	}
	x.logw.Printf("tofu init")
	// The shared plugin cache is not safe for concurrent inits (OpenTofu
	// documents this); inits are rare (only when providers change), so one at a time.
	x.w.initMu.Lock()
	err := x.tofu(ctx, x.logw, "init", "-input=false", "-no-color", "-reconfigure")
	x.w.initMu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(marker, []byte(sum), 0o600)
}

// stateUses is what a tenant's state holds resources of: the Provider
// names (each needs its provider block or module to destroy what it built)
// and the module calls.
type stateUses struct {
	Providers []string              `json:"providers"`
	Modules   []providers.ModuleUse `json:"modules,omitempty"`
}

// usesOf reads a state's uses.
func usesOf(state []byte) (stateUses, error) {
	names, err := providers.ProvidersInState(state)
	if err != nil {
		return stateUses{}, err
	}
	mods, err := providers.ModulesInState(state)
	if err != nil {
		return stateUses{}, err
	}
	return stateUses{Providers: names, Modules: mods}, nil
}

// stateUses is what the tenant's state uses: from the note the last
// successful run left, else (a new work dir: another replica ran before, or
// a note of an older version) from the state itself.
func (x *execution) stateUses(ctx context.Context) (stateUses, error) {
	if b, err := os.ReadFile(filepath.Join(x.dir, providersFile)); err == nil {
		var u stateUses
		if json.Unmarshal(b, &u) == nil {
			return u, nil
		}
	}
	// A tenant without a state (its first run) uses nothing: no init and
	// no state pull to find that out.
	if rev, err := x.w.cfg.State.StateRevision(ctx, x.tenant); err == nil && rev == 0 {
		return stateUses{}, nil
	}
	state, err := x.statePull(ctx)
	if err != nil {
		return stateUses{}, err
	}
	if len(bytes.TrimSpace(state)) == 0 {
		return stateUses{}, nil
	}
	u, err := usesOf(state)
	if err != nil {
		return stateUses{}, fmt.Errorf("reading the state: %w", err)
	}
	return u, nil
}

// rememberProviders notes what a state uses for the next run.
func (x *execution) rememberProviders(state []byte) {
	u, err := usesOf(state)
	if err != nil {
		return
	}
	b, _ := json.Marshal(u)
	_ = writeIfChanged(filepath.Join(x.dir, providersFile), b, 0o600)
}

// statePull returns the tenant's current state, decrypted, as `tofu state
// pull` would, read from the store and decrypted in this process: a tofu
// process, its plugin cache check and a key derivation of its own cost
// 0.2-0.3 CPU-s a run (issue 49's profile).
func (x *execution) statePull(ctx context.Context) ([]byte, error) {
	blob, err := x.w.cfg.State.State(ctx, x.tenant)
	if err != nil {
		return nil, fmt.Errorf("reading the state: %w", err)
	}
	if len(bytes.TrimSpace(blob)) == 0 {
		return nil, nil
	}
	state, err := x.w.DecryptState(ctx, x.tenant, blob)
	if err != nil {
		return nil, fmt.Errorf("decrypting the state: %w", err)
	}
	return state, nil
}

// applyJSON runs tofu with -json, writes its messages to the log as text,
// moves the phase to Applying when tofu starts changing things, and returns
// the change summary. A failure's error is tofu's error diagnostics.
func (x *execution) applyJSON(ctx context.Context, setPhase func(string), args ...string) (domain.ApplyResources, error) {
	x.logw.Printf("tofu %s", strings.Join(args, " "))
	ui := &tofu.UIWriter{Log: x.logw, SetPhase: setPhase}
	err := x.tofu(ctx, ui, append(args, "-no-color")...)
	ui.Flush()
	if err != nil && len(ui.Errors) > 0 {
		return ui.Summary, fmt.Errorf("%s", strings.Join(ui.Errors, "; "))
	}
	return ui.Summary, err
}

func writeIfChanged(path string, b []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	// A temp file of its own: two tenants' applies write the shared tofurc
	// at once, and one fixed name let the first rename take the second's.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, mode)); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
