package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// Bare metal (Provider type metal) is built straight through the Talos API, not
// with tofu: the machines exist already and booted Talos into maintenance mode.
// A metal node group's providerConfig lists them, or selects Machine objects
// registered by the user:
//
//	providerConfig:
//	  machines:                        # count must equal the number listed
//	  - {address: 10.0.0.10, installDisk: /dev/nvme0n1, hostname: cp-a}
//	  selector: "rack=r1"             # or: registered Machines of the group matching this label selector
//	  installDisk: /dev/sda            # the default for listed machines
//
// A machine in maintenance mode is given its rendered config without a client
// certificate (it installs and reboots): its day-0 config, recorded with its
// hash (rezuscloud.io/config-hash) and ConfigApplied=True reason Day0. From
// then on its config is the config controller's (controllers/configsync), as for
// every other provider: a metal run only records a configured machine's spec.
// etcd is bootstrapped once on the first control plane; a machine removed
// from its group is reset.

// Metal is what the worker needs of the Talos API (talos.NodeAPI).
type Metal interface {
	Probe(ctx context.Context, b *secrets.Bundle, address string) (talos.NodeState, error)
	ApplyConfig(ctx context.Context, b *secrets.Bundle, address string, cfg []byte, maintenance bool) (talos.ApplyResult, error)
	Bootstrap(ctx context.Context, b *secrets.Bundle, address string) error
	Reset(ctx context.Context, b *secrets.Bundle, address string) error
}

// Labels and annotations on machines built through the Talos API.
const (
	managedByMetal = domain.ManagedByMetal
	// ConfigHashAnnotation is the hash of the config last applied to a machine.
	ConfigHashAnnotation = domain.AnnotationConfigHash
	// BootstrappedCondition is the tenant condition recording etcd's bootstrap.
	BootstrappedCondition = "Bootstrapped"
)

// applyMetal builds a tenant's metal groups through the Talos API.
func (w *Worker) applyMetal(ctx context.Context, tenant, apply string, t *domain.Tenant, groups []*domain.NodeGroup, in metalInputs, logw *tofu.LogWriter) error {
	machines, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	var targets []providers.MetalTarget
	for _, ng := range groups {
		ts, err := providers.MetalTargets(ng, machines)
		if err != nil {
			return err
		}
		targets = append(targets, ts...)
	}
	wanted := map[string]bool{}
	for _, tg := range targets {
		wanted[tg.Name] = true
	}
	var errs []error
	// An address is one machine: two groups of the tenant listing it (a
	// write that raced another) would give it two configs.
	byAddress := map[string]string{}
	targets = slices.DeleteFunc(targets, func(tg providers.MetalTarget) bool {
		a := domain.CanonicalAddress(tg.Address)
		if first, ok := byAddress[a]; ok {
			logw.Printf("machine %s: %s is machine %s's address too: left out", tg.Name, tg.Address, first)
			errs = append(errs, fmt.Errorf("machine %s: %s is machine %s's address too", tg.Name, tg.Address, first))
			return true
		}
		byAddress[a] = tg.Name
		return false
	})
	gone, err := w.leaveEtcdMetal(ctx, tenant, in.bundle, wanted, logw)
	if err != nil {
		return err
	}
	// Machines that left their group are reset, then forgotten.
	for _, m := range machines {
		if m.Metadata.Labels[ManagedByLabel] != managedByMetal || wanted[m.Metadata.Name] {
			continue
		}
		logw.Printf("machine %s (%s) left its node group: resetting it", m.Metadata.Name, m.Spec.Address)
		if err := w.resetMetalMachine(ctx, tenant, in.bundle, m); err != nil {
			logw.Printf("resetting %s: %v (forgetting it anyway)", m.Metadata.Name, err)
		}
		w.deleteObject(ctx, domain.ObjectRef(domain.MachineKind, tenant, m.Metadata.Name))
	}
	w.deleteNodes(ctx, tenant, gone, logw)
	reps, err := w.pendingMetalReplacements(ctx, tenant, groups)
	if err != nil {
		return err
	}
	reps = w.reinstallMetal(ctx, tenant, reps, in, logw)
	if len(reps) > 0 {
		if err := w.cfg.Cache.Sync(ctx); err != nil {
			return err
		}
	}
	for i := range targets {
		tg := &targets[i]
		if err := w.applyMetalMachine(ctx, tenant, t, tg, in, logw); err != nil {
			logw.Printf("machine %s: %v", tg.Name, err)
			errs = append(errs, fmt.Errorf("machine %s: %w", tg.Name, err))
		}
	}
	err = errors.Join(errs...)
	w.finishReplacements(context.WithoutCancel(ctx), tenant, apply, reps, err)
	return err
}

type metalInputs struct {
	bundle    *secrets.Bundle
	patches   []domain.ConfigPatch
	cpAddress string
}

func (w *Worker) applyMetalMachine(ctx context.Context, tenant string, t *domain.Tenant, tg *providers.MetalTarget, in metalInputs, logw *tofu.LogWriter) error {
	ref := domain.ObjectRef(domain.MachineKind, tenant, tg.Name)
	spec := domain.MachineSpec{NodeGroup: tg.NodeGroup.Metadata.Name, Role: tg.NodeGroup.Spec.Role, Address: tg.Address,
		ProviderID: "metal://" + tg.Address, Shape: "metal", Hostname: tg.Hostname}
	if tg.Registered {
		spec = tg.Machine.Spec
		spec.Role = tg.NodeGroup.Spec.Role
	}
	m := &domain.Machine{Metadata: domain.ObjectMeta{Name: tg.Name, Tenant: tenant}, Spec: spec}
	if tg.Registered {
		// Its annotations may name its own install disk (domain.AnnotationInstallDisk).
		m.Metadata.Annotations = tg.Machine.Metadata.Annotations
	}
	// A listed machine's own install disk is the render's pick (by address),
	// so the config controller renders the same config from the same group.
	ng := tg.NodeGroup
	current, exists, err := projections.Get[domain.Machine](w.cfg.Cache, ref)
	if err != nil {
		return err
	}
	if exists && current.Metadata.Annotations[ConfigHashAnnotation] != "" {
		// Configured: its config is the config controller's.
		if current.Spec != spec {
			return w.recordMetalMachine(ctx, ref, tg, spec, "")
		}
		return nil
	}
	// The address is checked (and a name resolved) right before it is
	// dialled: the API's check at write may have raced another tenant.
	dial, err := w.metalDialAddress(ctx, tenant, tg.Address)
	if err != nil {
		return err
	}
	st, err := w.cfg.Metal.Probe(ctx, in.bundle, dial)
	if err != nil {
		return err
	}
	if !st.Maintenance {
		// It runs a config of the tenant that was not recorded (a run
		// stopped between the apply and the record): the config controller
		// gives it its rendered config.
		logw.Printf("machine %s (%s) is configured already; its config is the config controller's", tg.Name, tg.Address)
		return w.recordMetalMachine(ctx, ref, tg, spec, "")
	}
	cfg, err := talos.Render(talos.RenderInput{Tenant: t, NodeGroup: ng, Machine: m, ControlPlaneAddress: in.cpAddress, Patches: in.patches, Bundle: in.bundle, ImageFactory: w.cfg.ImageFactory})
	if err != nil {
		return fmt.Errorf("rendering its config: %w", err)
	}
	hash := talos.ConfigHash(cfg)
	res, err := w.cfg.Metal.ApplyConfig(ctx, in.bundle, dial, cfg, true)
	if err != nil {
		return err
	}
	logw.Printf("machine %s (%s): config applied from maintenance mode: %s", tg.Name, tg.Address, res.Details)
	if err := w.recordMetalMachine(ctx, ref, tg, spec, hash); err != nil {
		return err
	}
	if err := w.configRecorder().Applied(ctx, ref, hash, talos.ReasonDay0, "applied in maintenance mode: "+res.Details); err != nil {
		return err
	}
	w.writeMachineStatus(ctx, ref, func(s *domain.MachineStatus) { s.Stage = "Installing" })
	return nil
}

// recordMetalMachine creates or updates a metal machine's object with its
// spec and, when hash is set, the hash of the config it was given.
func (w *Worker) recordMetalMachine(ctx context.Context, ref domain.Ref, tg *providers.MetalTarget, spec domain.MachineSpec, hash string) error {
	rawSpec, _ := json.Marshal(spec)
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		cmd := domain.Command{Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(), NewUID: newUID()}
		if state == nil {
			cmd.Op = domain.OpCreate
			cmd.Object = &domain.Object{Metadata: domain.ObjectMeta{Name: tg.Name, Tenant: ref.Tenant,
				Labels: map[string]string{ManagedByLabel: managedByMetal, "rezuscloud.io/nodegroup": tg.NodeGroup.Metadata.Name}}, Spec: rawSpec}
		} else {
			cmd.Op = domain.OpUpdate
			cmd.Object = state.DeepCopy()
			cmd.Object.Spec = rawSpec
		}
		if hash != "" {
			if cmd.Object.Metadata.Annotations == nil {
				cmd.Object.Metadata.Annotations = map[string]string{}
			}
			cmd.Object.Metadata.Annotations[ConfigHashAnnotation] = hash
		}
		return domain.Decide(state, cmd)
	})
	if err != nil {
		return fmt.Errorf("recording it: %w", err)
	}
	return nil
}

func (w *Worker) writeMachineStatus(ctx context.Context, ref domain.Ref, mutate func(*domain.MachineStatus)) {
	updateStatus(ctx, w, ref, func(s *domain.MachineStatus, _ int64) { mutate(s) })
}

// bootstrap starts etcd on the tenant's first control-plane machine once it
// answers over mTLS, and records that in the tenant's Bootstrapped condition,
// so it is done once per cluster.
func (w *Worker) bootstrap(ctx context.Context, tenant string, bundle *secrets.Bundle, logw *tofu.LogWriter) error {
	t, ok, err := projections.Get[domain.Tenant](w.cfg.Cache, domain.TenantRef(tenant))
	if err != nil || !ok {
		return err
	}
	if slices.ContainsFunc(t.Status.Conditions, func(c domain.Condition) bool { return c.Type == BootstrappedCondition && c.Status == "True" }) {
		return nil
	}
	ms, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	cp, ok := firstControlPlane(ms)
	if !ok {
		return nil
	}
	logw.Printf("bootstrapping etcd on %s (%s)", cp.Metadata.Name, cp.Spec.Address)
	api := w.cfg.Metal
	if cp.Metadata.Labels[ManagedByLabel] == managedByValue && w.cfg.Built != nil {
		// A machine tofu built is where its provider put it (the emulator's
		// on loopback): the rule for listed metal addresses is not its.
		api = w.cfg.Built
	}
	deadline := time.Now().Add(w.cfg.BootstrapWait)
	for {
		st, err := api.Probe(ctx, bundle, cp.Spec.Address)
		if err == nil && !st.Maintenance {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bootstrapping etcd: %s did not come up with the tenant's config within %s (last: %v)", cp.Metadata.Name, w.cfg.BootstrapWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err := api.Bootstrap(ctx, bundle, cp.Spec.Address); err != nil {
		return fmt.Errorf("bootstrapping etcd on %s: %w", cp.Metadata.Name, err)
	}
	w.updateTenantStatus(ctx, tenant, func(s *domain.TenantStatus, gen int64) {
		setCondition(s, domain.Condition{Type: BootstrappedCondition, Status: "True", Reason: "EtcdBootstrapped",
			Message: "etcd was bootstrapped on " + cp.Metadata.Name}, w.cfg.Now())
	})
	logw.Printf("etcd bootstrapped on %s", cp.Metadata.Name)
	return nil
}

// resetMetal resets every metal machine of a deleted tenant (best effort: a
// machine that is gone cannot be reset, and must not keep the tenant).
func (w *Worker) resetMetal(ctx context.Context, tenant string, bundle *secrets.Bundle, logw *tofu.LogWriter) {
	ms, _ := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	for _, m := range ms {
		if m.Metadata.Labels[ManagedByLabel] != managedByMetal {
			continue
		}
		if err := w.resetMetalMachine(ctx, tenant, bundle, m); err != nil {
			logw.Printf("resetting %s: %v", m.Metadata.Name, err)
			continue
		}
		logw.Printf("reset %s (%s)", m.Metadata.Name, m.Spec.Address)
	}
}

// resetMetalMachine resets one of the tenant's metal machines, unless its
// address is another tenant's now or the rule refuses it: a reset wipes
// the disks of whatever answers there.
func (w *Worker) resetMetalMachine(ctx context.Context, tenant string, bundle *secrets.Bundle, m domain.Machine) error {
	dial, err := w.metalDialAddress(ctx, tenant, m.Spec.Address)
	if err != nil {
		return err
	}
	return w.cfg.Metal.Reset(ctx, bundle, dial)
}
