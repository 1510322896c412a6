package modulecheck_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/modulecheck"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// gatedTofu runs the real tofu behind the kit's gate: a run waits there
// before each command, so before the validation whose record the kit counts.
type gatedTofu struct {
	gate *controllertest.Gate
	bin  tofu.Binary
}

func (g gatedTofu) RunTofu(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error {
	if err := g.gate.Pass(ctx); err != nil {
		return err
	}
	return g.bin.RunTofu(ctx, dir, env, out, args...)
}

// TestConformance: a module provider is validated by tofu once (one
// Validated=True written by the validator), whether the leader restarts or
// loses the lease mid-validation or the provider's key is redelivered.
func TestConformance(t *testing.T) {
	bin, mirror := tofutest.Tools(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	controllertest.Conformance(t, controllertest.Subject[string]{
		Lease: modulecheck.ValidatorLease, Consumer: modulecheck.ValidatorConsumer, Queue: modulecheck.ValidatorQueue,
		// The replicas share a work dir (tofu's home and plugin cache), as
		// on one host.
		Setup: func(e *controllertest.Env) string { return e.T.TempDir() },
		Replica: func(e *controllertest.Env, workDir string, holder string) controllertest.Replica {
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			real := tofu.Binary{Bin: bin, Mirror: mirror}
			cfg := modulecheck.ValidatorConfig{Store: e.Store, Cache: cache, WorkDir: workDir, Holder: holder, Log: quiet, Clock: e.Clock,
				Tofu: tofu.Binary{Bin: bin, Mirror: mirror, Runner: gatedTofu{gate: e.Gate, bin: real}}}
			require.NoError(e.T, cfg.Validate())
			return modulecheck.NewModuleValidator(cfg)
		},
		Work: func(e *controllertest.Env, _ string) string {
			// A module of no provider: init installs nothing.
			spec, _ := json.Marshal(domain.ProviderSpec{Type: domain.ProviderModule,
				Module: &domain.ModuleSource{Files: map[string]string{"main.tf": "locals {\n  zone = \"a\"\n}\n"}}})
			_, err := e.Store.Execute(e.Ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.ProviderKind, "", "mod"),
				Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "mod"}, Spec: spec},
				Actor:  "test", Now: e.Clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
			require.NoError(e.T, err)
			return "mod"
		},
		Effects: func(e *controllertest.Env, _ string, _ string) (int, error) {
			return controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				if ev.Actor != modulecheck.ValidatorActor || ev.Object.Kind != domain.ProviderKind.Kind {
					return false
				}
				var st domain.ProviderStatus
				if json.Unmarshal(ev.Object.Status, &st) != nil {
					return false
				}
				c := domain.FindCondition(st.Conditions, domain.ConditionValidated)
				return c != nil && c.Status == "True"
			})
		},
	})
}
