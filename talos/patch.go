package talos

import (
	"encoding/json"
	"fmt"
	"sort"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/rezuscloud/rezuscloud/domain"
)

// ApplyPatches applies patches in order with machinery's config patcher.
// Machinery refuses JSON 6902 patches on multi-document configs (Talos 1.12+
// configs carry a HostnameConfig document beside v1alpha1), so a JSON 6902
// patch is applied to the v1alpha1 document alone, its paths being v1alpha1
// paths as users write them, and the other documents are kept as they were.
func ApplyPatches(cfg config.Provider, patches []configpatcher.Patch) (config.Provider, error) {
	for _, p := range patches {
		var err error
		if jp, ok := p.(jsonpatch.Patch); ok {
			cfg, err = applyJSON6902(cfg, jp)
		} else {
			var out configpatcher.Output
			if out, err = configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p}); err == nil {
				cfg, err = out.Config()
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func applyJSON6902(cfg config.Provider, p jsonpatch.Patch) (config.Provider, error) {
	v1 := cfg.RawV1Alpha1()
	if v1 == nil {
		return nil, fmt.Errorf("the config has no v1alpha1 document for a JSON 6902 patch")
	}
	var others []configdoc.Document
	for _, d := range cfg.Documents() {
		if _, ok := d.(*v1alpha1.Config); !ok {
			others = append(others, d)
		}
	}
	single, err := container.New(v1)
	if err != nil {
		return nil, err
	}
	raw, err := single.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, err
	}
	patched, err := configpatcher.JSON6902(raw, p)
	if err != nil {
		return nil, err
	}
	loaded, err := configloader.NewFromBytes(patched)
	if err != nil {
		return nil, err
	}
	return container.New(append(loaded.Documents(), others...)...)
}

// nodeGroupPatch gives the group's node labels and taints as a strategic
// patch, and a machine of an autoscaled group its provider ID
// (domain.AutoscalerProviderID): its kubelet registers the Node with it,
// which is how the cluster-autoscaler tells the group's Nodes from the
// instances RezusCloud lists, on every infrastructure alike.
func nodeGroupPatch(ng *domain.NodeGroup, tenant, machineName string) (configpatcher.Patch, error) {
	providerID := ng.Spec.Autoscaling != nil && machineName != "" && tenant != ""
	if len(ng.Spec.Labels) == 0 && len(ng.Spec.Taints) == 0 && !providerID {
		return nil, nil
	}
	m := map[string]any{}
	if providerID {
		m["kubelet"] = map[string]any{"extraArgs": map[string]string{"provider-id": domain.AutoscalerProviderID(tenant, machineName)}}
	}
	if len(ng.Spec.Labels) > 0 {
		m["nodeLabels"] = ng.Spec.Labels
	}
	if len(ng.Spec.Taints) > 0 {
		taints := map[string]string{}
		for _, t := range ng.Spec.Taints {
			taints[t.Key] = t.Value + ":" + t.Effect
		}
		m["nodeTaints"] = taints
	}
	// JSON is YAML, and machinery's loader reads either.
	raw, err := json.Marshal(map[string]any{"version": "v1alpha1", "machine": m})
	if err != nil {
		return nil, err
	}
	p, err := configpatcher.LoadPatch(raw)
	if err != nil {
		return nil, fmt.Errorf("node group %s labels and taints: %w", ng.Metadata.Name, err)
	}
	return p, nil
}

// SelectPatches returns the enabled patches that target a machine of role in
// node group (and machine, when not empty), ordered by weight, then name.
func SelectPatches(all []domain.ConfigPatch, role, nodeGroup, machine string) []domain.ConfigPatch {
	var out []domain.ConfigPatch
	for _, p := range all {
		if p.Spec.Enabled != nil && !*p.Spec.Enabled {
			continue
		}
		if Targets(p.Spec.Target, role, nodeGroup, machine) {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Spec.Weight != out[j].Spec.Weight {
			return out[i].Spec.Weight < out[j].Spec.Weight
		}
		return out[i].Metadata.Name < out[j].Metadata.Name
	})
	return out
}

// Targets reports whether a patch target selects the machine.
func Targets(t domain.PatchTarget, role, nodeGroup, machine string) bool {
	switch t.Kind {
	case domain.TargetAll, "":
		return true
	case domain.TargetRole:
		return t.Name == role
	case domain.TargetNodeGroup:
		return t.Name == nodeGroup
	case domain.TargetMachine:
		return machine != "" && t.Name == machine
	}
	return false
}

// LoadPatch parses a patch with machinery and checks it is of the declared format.
func LoadPatch(spec domain.ConfigPatchSpec) (configpatcher.Patch, error) {
	p, err := configpatcher.LoadPatch([]byte(spec.Patch))
	if err != nil {
		return nil, err
	}
	_, isJSON := p.(jsonpatch.Patch)
	switch {
	case spec.Format == domain.PatchJSON6902 && !isJSON:
		return nil, fmt.Errorf("format is json6902 but the patch is a strategic merge patch (a partial machine config)")
	case spec.Format != domain.PatchJSON6902 && isJSON:
		return nil, fmt.Errorf("format is strategic but the patch is a JSON 6902 patch; set format: json6902")
	}
	return p, nil
}
