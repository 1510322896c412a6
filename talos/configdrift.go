package talos

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"

	"github.com/rezuscloud/rezuscloud/domain"
)

// RunningConfig is the config a node runs: its COSI MachineConfig
// (config.talos.dev, id v1alpha1), as `talosctl get machineconfig` shows it,
// in the bytes the node holds.
func (a NodeAPI) RunningConfig(ctx context.Context, b *secrets.Bundle, address string) ([]byte, error) {
	var out []byte
	err := a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		mc, err := safe.StateGetByID[*config.MachineConfig](ctx, c.COSI, config.ActiveID)
		if err != nil {
			return fmt.Errorf("reading the node's MachineConfig: %w", err)
		}
		out, err = mc.Provider().Bytes()
		return err
	})
	return out, err
}

// RunningSchematic is the Image Factory schematic a node's image was built
// from: the version of its "schematic" extension ("" for an image the
// factory did not build).
func (a NodeAPI) RunningSchematic(ctx context.Context, b *secrets.Bundle, address string) (string, error) {
	var out string
	err := a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		var err error
		_, out, err = NodeExtensions(ctx, c)
		return err
	})
	return out, err
}

// SameConfig reports whether two machine configs say the same: equal once
// each is loaded and encoded without comments, so formatting and comments
// do not count as drift. A config that does not load differs.
func SameConfig(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ca, err := canonicalConfig(a)
	if err != nil {
		return false
	}
	cb, err := canonicalConfig(b)
	if err != nil {
		return false
	}
	return bytes.Equal(ca, cb)
}

func canonicalConfig(b []byte) ([]byte, error) {
	p, err := configloader.NewFromBytes(b)
	if err != nil {
		return nil, err
	}
	return p.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
}

// ConfigDrift is a machine whose running config is not the one RezusCloud
// applied to it.
type ConfigDrift struct {
	Machine string
	// Reason says how it differs, for the tenant's status.
	Reason string
	// RunningHash is ConfigHash of the config the node runs.
	RunningHash string
	// Schematic is set when the machine runs another Image Factory
	// schematic than its node group declares (its config may be as
	// declared): correcting that is a re-image, which an upgrade does, not
	// the config controller.
	Schematic bool
	// NodeGroup is the machine's node group.
	NodeGroup string
}

// SchematicCorrector re-images a node group whose machines run another
// schematic than it declares (the upgrade saga: a re-image run).
type SchematicCorrector interface {
	CorrectSchematicDrift(ctx context.Context, tenant, group string, machines []string) error
}

// ConfigReader reads a node's running config and schematic (NodeAPI).
type ConfigReader interface {
	RunningConfig(ctx context.Context, b *secrets.Bundle, address string) ([]byte, error)
	RunningSchematic(ctx context.Context, b *secrets.Bundle, address string) (string, error)
}

// ConfigDriftChecker finds machines re-configured behind RezusCloud's back
// (talosctl apply-config or edit) and hands them back to the config
// controller.
type ConfigDriftChecker struct {
	Service *Service
	Nodes   ConfigReader
	// Recorder writes a drifted machine's config hash when drift is corrected.
	Recorder ConfigRecorder
	// Schematics, when set, corrects schematic drift (a re-image run);
	// unset, schematic drift is reported only.
	Schematics SchematicCorrector
	// Parallel bounds how many nodes are read at once; default 8.
	Parallel int
}

// driftCandidate says whether a machine's running config is compared: a
// machine the config controller recorded as holding its rendered config
// (hash and status agree), with an address, not being deleted. Any other is
// on its way to its config (or out), which is not drift.
func driftCandidate(m *domain.Machine, renderedHash string) bool {
	return m.Metadata.DeletionTimestamp == nil && m.Spec.Address != "" && m.Status.ConfigUpToDate &&
		m.Metadata.Annotations[domain.AnnotationConfigHash] == renderedHash
}

// ConfigDrift lists the tenant's machines whose running config differs from
// the declared one they are recorded as holding, or whose image runs another
// Image Factory schematic than their node group declares (whatever their
// config's progress: the image is not the config controller's). A machine
// that does not answer is left out: an unreachable machine is the health
// probe's and the remediation's concern, not drift.
func (d ConfigDriftChecker) ConfigDrift(ctx context.Context, tenant string) ([]ConfigDrift, error) {
	desired, err := d.Service.Desired(ctx, tenant)
	if err != nil {
		return nil, err
	}
	type job struct {
		m domain.Machine
		// cfg is the declared config when the machine is recorded as
		// holding it (driftCandidate), else nil: its config is not compared.
		cfg []byte
		// schematic is the one its group declares ("": its own installImage).
		schematic string
	}
	var jobs []job
	for _, m := range desired.Machines() {
		if m.Metadata.DeletionTimestamp != nil || m.Spec.Address == "" {
			continue
		}
		j := job{m: m}
		if cfg, err := desired.Config(&m, ""); err == nil && driftCandidate(&m, ConfigHash(cfg)) {
			j.cfg = cfg
		}
		if ng, ok := desired.NodeGroup(m.Spec.NodeGroup); ok {
			j.schematic = domain.InstallerOf(d.Service.ImageFactory(), &desired.view.tenant.Spec, &ng.Spec, "").Schematic
		}
		if j.cfg != nil || j.schematic != "" {
			jobs = append(jobs, j)
		}
	}
	parallel := d.Parallel
	if parallel <= 0 {
		parallel = 8
	}
	var (
		mu  sync.Mutex
		out []ConfigDrift
		wg  sync.WaitGroup
		sem = make(chan struct{}, parallel)
	)
	bundle := desired.view.bundle
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if j.schematic != "" {
				if sch, err := d.Nodes.RunningSchematic(ctx, bundle, j.m.Spec.Address); err == nil && !domain.SchematicMatches(sch, j.schematic) {
					mu.Lock()
					out = append(out, ConfigDrift{Machine: j.m.Metadata.Name, Schematic: true, NodeGroup: j.m.Spec.NodeGroup,
						Reason: fmt.Sprintf("the node runs schematic %.12s…, its node group declares %.12s… (an upgrade re-images it)", orVanilla(sch), j.schematic)})
					mu.Unlock()
					return
				}
			}
			if j.cfg == nil {
				return
			}
			running, err := d.Nodes.RunningConfig(ctx, bundle, j.m.Spec.Address)
			if err != nil || SameConfig(running, j.cfg) {
				return
			}
			mu.Lock()
			out = append(out, ConfigDrift{Machine: j.m.Metadata.Name, RunningHash: ConfigHash(running),
				Reason: "the node runs a config other than the one RezusCloud applied (changed through the Talos API)"})
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b ConfigDrift) int { return strings.Compare(a.Machine, b.Machine) })
	return out, ctx.Err()
}

func orVanilla(id string) string {
	if id == "" {
		return domain.VanillaSchematic
	}
	return id
}

// ReasonConfigDrifted is the ConfigApplied reason of a machine found
// running another config than the one applied: the config controller
// applies the declared one again.
const ReasonConfigDrifted = "ConfigDrifted"

// CorrectConfigDrift records that machine runs the config of hash
// runningHash, not the declared one: the config controller, seeing a held
// hash other than the rendered one, applies the declared config again.
func (d ConfigDriftChecker) CorrectConfigDrift(ctx context.Context, tenant string, drift ConfigDrift) error {
	if drift.Schematic {
		// Not the config controller's to correct: a re-image is the
		// upgrade saga's.
		if d.Schematics == nil {
			return nil
		}
		return d.Schematics.CorrectSchematicDrift(ctx, tenant, drift.NodeGroup, []string{drift.Machine})
	}
	ref := domain.ObjectRef(domain.MachineKind, tenant, drift.Machine)
	if err := d.Recorder.Applied(ctx, ref, drift.RunningHash, ReasonConfigDrifted, drift.Reason); err != nil {
		return err
	}
	return d.Recorder.Failed(ctx, ref, ReasonConfigDrifted, drift.Reason+"; the declared config is applied again")
}
