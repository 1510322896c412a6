package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/kube/kubeclient"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// infraFlags configure the apply worker and the in-process emulator.
func infraFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tofu", EnvVars: []string{"REZUSCLOUD_TOFU"}, Value: "tofu", Usage: "the OpenTofu binary (a path, or a name on PATH)"},
		&cli.StringFlag{Name: "provider-mirror", EnvVars: []string{"REZUSCLOUD_PROVIDER_MIRROR"}, Usage: "a provider filesystem mirror for offline installs (`go tool task tools` builds one in .tools/mirror); empty installs from the registries"},
		&cli.IntFlag{Name: "upgrade-concurrency", Value: 16, EnvVars: []string{"REZUSCLOUD_UPGRADE_CONCURRENCY"}, Usage: "how many tenants upgrade at once (a run mostly waits on its machines' reboots; a fleet rollout starts many)"},
		&cli.IntFlag{Name: "apply-concurrency", Value: 4, EnvVars: []string{"REZUSCLOUD_APPLY_CONCURRENCY"}, Usage: "how many tenants apply at once"},
		&cli.DurationFlag{Name: "apply-debounce", Value: 2 * time.Second, EnvVars: []string{"REZUSCLOUD_APPLY_DEBOUNCE"}, Usage: "quiet time after a change before a tenant applies"},
		&cli.DurationFlag{Name: "apply-timeout", Value: 30 * time.Minute, EnvVars: []string{"REZUSCLOUD_APPLY_TIMEOUT"}, Usage: "how long one apply may run"},
		&cli.DurationFlag{Name: "resync", Value: time.Minute, EnvVars: []string{"REZUSCLOUD_RESYNC"}, Usage: "how often the apply worker looks for tenants whose drift check is due and deleted tenants whose destroy failed (0 disables both)"},
		&cli.DurationFlag{Name: "drift-interval", Value: time.Hour, EnvVars: []string{"REZUSCLOUD_DRIFT_INTERVAL"}, Usage: "how often a tenant without spec.driftCheck is checked for drift (tofu plan, running configs); 0: only tenants that declare spec.driftCheck are"},
		&cli.DurationFlag{Name: "drift-min-interval", Value: 5 * time.Minute, EnvVars: []string{"REZUSCLOUD_DRIFT_MIN_INTERVAL"}, Usage: "the shortest drift-check interval a tenant gets (a shorter spec.driftCheck.interval is raised to it)"},
		&cli.DurationFlag{Name: "remediation-interval", Value: 15 * time.Second, EnvVars: []string{"REZUSCLOUD_REMEDIATION_INTERVAL"}, Usage: "how often the machines of node groups with spec.remediation are probed for replacement"},
		&cli.DurationFlag{Name: "rollout-interval", Value: 5 * time.Second, EnvVars: []string{"REZUSCLOUD_ROLLOUT_INTERVAL"}, Usage: "how often a rollout under way looks at its tenants again (their health during a soak, a config patch taken) when no event moves it"},
		&cli.BoolFlag{Name: "allow-module-exec", EnvVars: []string{"REZUSCLOUD_ALLOW_MODULE_EXEC"}, Usage: "let module providers use the local-exec, remote-exec and file provisioners (they run commands on this host or copy files to machines)"},
		&cli.BoolFlag{Name: "allow-provider-downloads", EnvVars: []string{"REZUSCLOUD_ALLOW_PROVIDER_DOWNLOADS"}, Usage: "without --provider-mirror, let module providers name providers tofu downloads from their registries and runs on this host (refused otherwise)"},
		&cli.StringFlag{Name: "tofu-sandbox", Value: "auto", EnvVars: []string{"REZUSCLOUD_TOFU_SANDBOX"}, Usage: "run tofu where the data dir and the secrets are hidden from it (Linux mount and PID namespaces): on (refuse to start without), auto (without it, module providers are refused) or off (trust every module's author)"},
		&cli.BoolFlag{Name: "with-emulator", EnvVars: []string{"REZUSCLOUD_WITH_EMULATOR"}, Usage: "run the Talos node emulator in-process (nodes under <data-dir>/emulator) and register the Provider `emulated` for it"},
		&cli.StringFlag{Name: "emulator-kube", Value: "auto", EnvVars: []string{"REZUSCLOUD_EMULATOR_KUBE"}, Usage: "run a real Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler) on emulated control planes and an emulated kubelet on every node: on, off, or auto (on when `go tool task tools` has built them into --kube-tools)"},
		&cli.StringFlag{Name: "kube-tools", Value: ".tools", EnvVars: []string{"REZUSCLOUD_KUBE_TOOLS"}, Usage: "where hack/kube.sh built etcd and the Kubernetes binaries (kube/<version>/, etcd/<version>/), for --emulator-kube"},
		&cli.StringFlag{Name: "image-factory", Value: domain.DefaultImageFactory, EnvVars: []string{"REZUSCLOUD_IMAGE_FACTORY"}, Usage: "the Talos Image Factory machines install from: installers are <its host>/metal-installer/<schematic>:<version>, and node groups' schematics are registered with it (POST /schematics) before machines install them; a self-hosted factory for air-gapped sites. With --with-emulator and no --image-factory, images keep the public factory's name and schematics go to the emulator's stand-in"},
		&cli.StringFlag{Name: "emulator-env", EnvVars: []string{"REZUSCLOUD_EMULATOR_ENV"}, Usage: "build on a node emulator run apart (`rezuscloud emulator --data-dir D`): its D/emulator/api.env; registers the Provider `emulated` on it as --with-emulator does, without running it in this process"},
		&cli.StringFlag{Name: "emulator-listen", Value: "127.0.0.1:0", EnvVars: []string{"REZUSCLOUD_EMULATOR_LISTEN"}, Usage: "the emulator's HTTP API address (with --with-emulator)"},
	}
}

type infraConfig struct {
	Tofu, ProviderMirror string
	ApplyConcurrency     int
	ApplyDebounce        time.Duration
	ApplyTimeout         time.Duration
	Resync               time.Duration
	// DriftInterval and DriftMinInterval shape drift checks (--drift-*).
	DriftInterval, DriftMinInterval time.Duration
	// RemediationInterval is how often groups with remediation are probed.
	RemediationInterval time.Duration
	// RolloutInterval is how often a rollout under way is looked at again.
	RolloutInterval time.Duration
	// UpgradeConcurrency is how many tenants upgrade at once.
	UpgradeConcurrency int
	WithEmulator       bool
	EmulatorListen     string
	// Apart is the emulator run apart (--emulator-env), nil without.
	Apart *apartEmulator
	// ImageFactory is the Image Factory URL (--image-factory);
	// ImageFactorySet says it was given, not defaulted.
	ImageFactory    string
	ImageFactorySet bool
	// EmulatorKube is on, off or auto (--emulator-kube); KubeTools holds
	// the binaries it runs.
	EmulatorKube, KubeTools string
	AllowModuleExec         bool
	// AllowProviderDownloads lets module providers work without a mirror.
	AllowProviderDownloads bool
	// TofuSandbox is on, auto or off (--tofu-sandbox).
	TofuSandbox string
	// StatePassphrase encrypts TF state (REZUSCLOUD_STATE_PASSPHRASE).
	StatePassphrase string
}

func infraConfigFrom(c *cli.Context) infraConfig {
	resync := c.Duration("resync")
	if resync == 0 {
		resync = -1
	}
	return infraConfig{
		Apart: nil, // read by serveConfigFrom (--emulator-env)
		Tofu:  c.String("tofu"), ProviderMirror: c.String("provider-mirror"),
		ApplyConcurrency: c.Int("apply-concurrency"), ApplyDebounce: c.Duration("apply-debounce"),
		ApplyTimeout: c.Duration("apply-timeout"), Resync: resync, RemediationInterval: c.Duration("remediation-interval"),
		RolloutInterval: c.Duration("rollout-interval"), UpgradeConcurrency: c.Int("upgrade-concurrency"),
		DriftInterval: c.Duration("drift-interval"), DriftMinInterval: c.Duration("drift-min-interval"),
		WithEmulator: c.Bool("with-emulator"), EmulatorListen: c.String("emulator-listen"),
		ImageFactory: c.String("image-factory"), ImageFactorySet: c.IsSet("image-factory"),
		EmulatorKube: c.String("emulator-kube"), KubeTools: c.String("kube-tools"),
		AllowModuleExec: c.Bool("allow-module-exec"), TofuSandbox: c.String("tofu-sandbox"),
		AllowProviderDownloads: c.Bool("allow-provider-downloads"),
		StatePassphrase:        os.Getenv("REZUSCLOUD_STATE_PASSPHRASE"),
	}
}

// EmulatedProvider is the Provider that --with-emulator registers.
const EmulatedProvider = "emulated"

// emulatorAPI is where the emulator's HTTP API listens, the bearer token
// it needs, and the versions its nodes can run (nil: any).
type emulatorAPI struct {
	URL, Token string
	Versions   *domain.ProviderVersions
}

// EmulatorAPIFile is where, under the data dir, serve --with-emulator
// writes the emulator API's URL and token (mode 0600) as environment
// variables, for the emulated provider, curl and tests run by the server's
// owner: `set -a; . data/emulator/api.env`. The API is not announced
// anywhere else (the Provider holds both in sealed credentials).
const EmulatorAPIFile = "emulator/api.env"

// startEmulator runs the node emulator and its HTTP API until ctx ends, and
// returns the API's URL and token once it listens.
func startEmulator(ctx context.Context, log *slog.Logger, dataDir string, infra infraConfig, run func(func() error)) (emulatorAPI, error) {
	kube, err := emulatorKube(log, infra.EmulatorKube, infra.KubeTools)
	if err != nil {
		return emulatorAPI{}, err
	}
	emu, err := emulator.New(emulator.Config{StateDir: filepath.Join(dataDir, "emulator"),
		// The README sends users to talosctl against these nodes.
		ShutdownDelay: emulator.InteractiveShutdownDelay, Kube: kube,
		Logf: func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...), "component", "emulator") }})
	if err != nil {
		return emulatorAPI{}, fmt.Errorf("starting the emulator: %w", err)
	}
	ln, err := net.Listen("tcp", infra.EmulatorListen)
	if err != nil {
		return emulatorAPI{}, fmt.Errorf("emulator: listening on %s: %w", infra.EmulatorListen, err)
	}
	srv := &http.Server{Handler: emu.Handler(), ReadHeaderTimeout: 10 * time.Second}
	run(func() error { return emu.Run(ctx) })
	run(func() error {
		go func() {
			<-ctx.Done()
			shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shCtx)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("emulator http: %w", err)
		}
		return nil
	})
	select {
	case <-emu.Ready():
	case <-ctx.Done():
		return emulatorAPI{}, ctx.Err()
	}
	api := emulatorAPI{URL: "http://" + ln.Addr().String(), Token: emu.APIToken(), Versions: emulatedVersions(kube)}
	if err := os.WriteFile(filepath.Join(dataDir, EmulatorAPIFile), emulatorEnvFile(api, kube == nil), 0o600); err != nil {
		return emulatorAPI{}, fmt.Errorf("emulator: %w", err)
	}
	log.Info("talos node emulator started", "api", api.URL, "dir", filepath.Join(dataDir, "emulator"),
		"credentials", filepath.Join(dataDir, EmulatorAPIFile))
	return api, nil
}

// emulatorKube decides --emulator-kube and says in the log what nodes run.
func emulatorKube(log *slog.Logger, mode, tools string) (*emulator.KubeConfig, error) {
	kube, err := emulator.KubeFromMode(mode, tools)
	switch {
	case err != nil:
		return nil, fmt.Errorf("--emulator-kube=%s: %w", mode, err)
	case kube == nil && mode == "off":
		log.Info("emulated nodes are light: no Kubernetes API (--emulator-kube=off)")
	case kube == nil:
		log.Info("emulated nodes are light: no Kubernetes API; `go tool task tools` builds the real control plane they run when it is there", "kubeTools", tools)
	default:
		log.Info("emulated control planes run a real Kubernetes control plane", "versions", strings.Join(emulator.KubeVersions(tools), ", "), "kubeTools", tools)
	}
	return kube, nil
}

// emulatedVersions are the versions the emulated provider's machines can
// run: with the real control plane, the Kubernetes versions whose binaries
// the tools dir holds (an Upgrade to another would wait for an API server
// that never starts); with light nodes, any (nil), as they only imitate
// Kubernetes. Talos is not limited: a node takes any installer's tag.
func emulatedVersions(kube *emulator.KubeConfig) *domain.ProviderVersions {
	if kube == nil {
		return nil
	}
	vs := emulator.KubeVersions(kube.ToolsDir)
	if len(vs) == 0 {
		return nil
	}
	return &domain.ProviderVersions{Kubernetes: vs}
}

// drainSkip tells the sagas which node groups have no Kubernetes to drain
// through: with --with-emulator and light nodes (--emulator-kube off, or
// auto without the built control plane), no group is drained: such a server
// is a test or demo setup whose machines (the emulated provider's, and module
// providers' built on the emulator) run no kubelet and no API server.
func drainSkip(infra infraConfig) func(ng *domain.NodeGroup) string {
	if !infra.lightNodes() {
		return nil
	}
	// Every group: module providers in tests build on the emulator too.
	return func(*domain.NodeGroup) string {
		return "the server runs the emulator with light nodes: they run no Kubernetes (--emulator-kube)"
	}
}

// emulated says the server builds on the emulator: run in-process
// (--with-emulator) or apart (--emulator-env).
func (infra infraConfig) emulated() bool { return infra.WithEmulator || infra.Apart != nil }

// lightNodes says the emulator's nodes run no Kubernetes.
func (infra infraConfig) lightNodes() bool {
	if infra.Apart != nil {
		return infra.Apart.Light
	}
	if !infra.WithEmulator {
		return false
	}
	kube, err := emulator.KubeFromMode(infra.EmulatorKube, infra.KubeTools)
	return err == nil && kube == nil
}

// noKube is drainSkip for a whole tenant: the health probe asks it whether
// the tenant's machines run Kubernetes.
func noKube(skip func(*domain.NodeGroup) string) func(tenant string) string {
	if skip == nil {
		return nil
	}
	return func(tenant string) string {
		return skip(&domain.NodeGroup{Metadata: domain.ObjectMeta{Tenant: tenant}})
	}
}

// kubeAccess keeps the access RBAC of tenants' clusters, but for tenants
// whose machines run no Kubernetes (the light emulator).
type kubeAccess struct {
	clients *kubeclient.Clients
	noKube  func(tenant string) string
}

func (k kubeAccess) EnsureAccessRBAC(ctx context.Context, tenant string) error {
	if k.noKube != nil && k.noKube(tenant) != "" {
		return nil
	}
	return k.clients.EnsureAccessRBAC(ctx, tenant)
}

// credentialStore keeps Provider credentials sealed (identity.Service).
type credentialStore interface {
	PutProviderCredentials(ctx context.Context, name string, data map[string]string) (bool, error)
}

// registerEmulatedProvider creates (or points at the emulator) the Provider
// `emulated` once the read model is ready. The emulator's URL and token go
// into sealed credentials of the same name (spec.credentialsRef), which
// the runner hands tofu as EMULATOR_ENDPOINT and EMULATOR_TOKEN: every role
// reads Providers, and the API makes machines and injects faults. Its
// spec.versions are the versions the emulator's nodes can run
// (emulatedVersions), so that the API refuses the others at write time.
func registerEmulatedProvider(ctx context.Context, store *eventstore.Store, cache *projections.Cache, creds credentialStore, api emulatorAPI) error {
	if err := cache.Sync(ctx); err != nil {
		return err
	}
	if _, err := creds.PutProviderCredentials(ctx, EmulatedProvider, map[string]string{
		providers.EmulatorEndpointEnv: api.URL, providers.EmulatorTokenEnv: api.Token}); err != nil {
		return fmt.Errorf("storing the emulator's credentials: %w", err)
	}
	// The versions are the current tools', written over the stored ones at
	// every start: a server restarted with other tools (or light nodes)
	// must not go on refusing or admitting by the old ones.
	spec, _ := json.Marshal(domain.ProviderSpec{Type: domain.ProviderEmulated, Config: json.RawMessage(`{}`),
		CredentialsRef: &domain.SecretRef{Name: EmulatedProvider}, Versions: api.Versions})
	ref := domain.Ref{Kind: domain.ProviderKind.Kind, Name: EmulatedProvider}
	_, err := store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5}, func(state *domain.Object) ([]domain.Event, error) {
		cmd := domain.Command{Ref: ref, Actor: "system:emulator", Now: time.Now(), NewUID: uuid.NewString()}
		if state == nil {
			cmd.Op = domain.OpCreate
			cmd.Object = &domain.Object{Metadata: domain.ObjectMeta{Name: EmulatedProvider,
				Labels: map[string]string{"rezuscloud.io/emulator": "true"}}, Spec: spec}
		} else {
			cmd.Op = domain.OpUpdate
			cmd.Object = state.DeepCopy()
			cmd.Object.Spec = spec
		}
		return domain.Decide(state, cmd)
	})
	return err
}

// backendURL is how tofu, run on this host, reaches the server.
func backendURL(addr net.Addr, tls bool) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// secretFiles are the files of secrets serve's flags name, which tofu's
// sandbox shows empty (those in the data dir are hidden with it). A secret
// given as a value (--admin-token, REZUSCLOUD_SECRETS_PASSPHRASE, the
// session signing key) is only in the server's memory and environment,
// which the sandbox's own PID namespace keeps out of tofu's /proc.
// TestSandboxHidesEverySecretFile fails on a flag added without saying
// whether it names one.
func (cfg serveConfig) secretFiles() []string {
	var files []string
	for _, f := range []string{cfg.SecretsKeyFile, cfg.TLS.KeyFile, cfg.NATSCreds, cfg.SSO.SecretFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// tofuSandbox is the sandbox tofu runs in (--tofu-sandbox): the data dir and
// the secret files outside it hidden, but for the plugin caches. nil when it
// is off, or when auto finds that this host cannot make one (then module
// providers are refused); on fails the start instead.
func tofuSandbox(ctx context.Context, log *slog.Logger, cfg serveConfig, workDir string) (*tofu.Sandbox, error) {
	mode := cfg.Infra.TofuSandbox
	switch mode {
	case "off":
		log.Warn("tofu runs without its sandbox (--tofu-sandbox=off): every module provider's author can read this server's secrets")
		return nil, nil
	case "on", "auto":
	default:
		return nil, fmt.Errorf("--tofu-sandbox %q: want on, auto or off", mode)
	}
	sb := &tofu.Sandbox{Hide: []string{cfg.DataDir}, HideFiles: cfg.secretFiles(),
		Keep: []string{filepath.Join(workDir, "plugin-cache"), filepath.Join(workDir, "validate-plugin-cache")}}
	if err := tofu.ProbeSandbox(ctx, sb); err != nil {
		if mode == "on" {
			return nil, fmt.Errorf("--tofu-sandbox=on: tofu's sandbox cannot be made here: %w", err)
		}
		log.Error("tofu's sandbox cannot be made here: module providers are refused (--tofu-sandbox=off trusts every module's author)", "err", err)
		return nil, nil
	}
	return sb, nil
}
