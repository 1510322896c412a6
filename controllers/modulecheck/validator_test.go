package modulecheck

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// TestModuleValidatorRecordsTofuValidate runs the validator with real tofu
// and the emulated provider from the mirror: a module that hcl accepts but
// tofu does not (a reference to an undeclared variable) gets Validated=False
// with tofu's diagnostic at file:line:col, and runs of tenants using it are
// refused naming the Provider; the fixed module gets Validated=True for its
// new generation.
func TestModuleValidatorRecordsTofuValidate(t *testing.T) {
	tofuBin, mirror := tofutest.Tools(t)
	mirror = tofutest.WithProvider(t, mirror, "registry.opentofu.org/rezuscloud/emulated", "0.1.0", "./cmd/terraform-provider-emulated")
	ctx, cancel := context.WithCancel(context.Background())
	env := eventstoretest.Start(t)
	cache := projections.NewCache(env.Store, nil)
	done := make(chan error, 2)
	go func() { done <- cache.Run(ctx) }()
	v := NewModuleValidator(ValidatorConfig{Store: env.Store, Cache: cache, Tofu: tofu.Binary{Bin: tofuBin, Mirror: mirror},
		WorkDir: t.TempDir(), Holder: "test"})
	go func() { done <- v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			require.NoError(t, <-done)
		}
	})
	require.Eventually(t, v.Leading, 20*time.Second, 10*time.Millisecond)

	files, ok := providers.BuiltinModule(domain.ProviderEmulated)
	require.True(t, ok)
	files.Files["bad.tf"] = "locals {\n  zone = var.nope\n}\n"
	spec := func(f *domain.ModuleSource) json.RawMessage {
		b, err := json.Marshal(domain.ProviderSpec{Type: domain.ProviderModule, Module: f, Config: json.RawMessage(`{"emulator":"http://127.0.0.1:1"}`)})
		require.NoError(t, err)
		return b
	}
	_, causes := providers.ModuleChecker{}.Check(&domain.ProviderSpec{Type: domain.ProviderModule, Module: files, Config: json.RawMessage(`{"emulator":"http://127.0.0.1:1"}`)})
	require.Empty(t, causes, "hcl alone cannot tell")
	ref := domain.ObjectRef(domain.ProviderKind, "", "mod")
	execute := func(op domain.Op, f *domain.ModuleSource) {
		obj := &domain.Object{Metadata: domain.ObjectMeta{Name: "mod"}, Spec: spec(f)}
		res, err := env.Store.Execute(ctx, domain.Command{Op: op, Ref: ref, Object: obj, Actor: "test", Now: time.Now(), NewUID: uuid.NewString()},
			eventstore.UpdateOptions{Retries: 5, Hint: cache})
		require.NoError(t, err)
		require.NoError(t, cache.WaitFor(ctx, res.Seq))
	}
	validated := func(gen int64, status string) domain.Condition {
		var c domain.Condition
		require.Eventually(t, func() bool {
			p, ok, err := projections.Get[domain.Provider](cache, ref)
			if err != nil || !ok {
				return false
			}
			c, ok = validatedCondition(p)
			return ok && c.ObservedGeneration == gen && c.Status == status
		}, 2*time.Minute, 50*time.Millisecond, "Validated=%s at generation %d", status, gen)
		return c
	}

	execute(domain.OpCreate, files)
	c := validated(1, "False")
	require.Equal(t, domain.ReasonModuleInvalid, c.Reason)
	require.Contains(t, c.Message, "bad.tf:2:10: Reference to undeclared input variable")
	p, _, err := projections.Get[domain.Provider](cache, ref)
	require.NoError(t, err)
	err = domain.CheckModules(map[string]*domain.Provider{"mod": p})
	require.True(t, errors.Is(err, domain.ErrModuleInvalid), "%v", err)
	require.True(t, strings.HasPrefix(err.Error(), "provider mod: the module does not validate (Validated=False, Invalid): bad.tf:2:10:"), err.Error())

	delete(files.Files, "bad.tf")
	execute(domain.OpUpdate, files)
	c = validated(2, "True")
	require.Equal(t, domain.ReasonModuleValid, c.Reason)
	p, _, err = projections.Get[domain.Provider](cache, ref)
	require.NoError(t, err)
	require.NoError(t, domain.CheckModules(map[string]*domain.Provider{"mod": p}))

	// A provider tofu cannot install fails init, as InitFailed.
	files.Files["extra.tf"] = "resource \"aws_s3_bucket\" \"b\" {}\n"
	execute(domain.OpUpdate, files)
	c = validated(3, "False")
	require.Equal(t, domain.ReasonModuleInitFailed, c.Reason)
	require.Contains(t, c.Message, "hashicorp/aws")
}
