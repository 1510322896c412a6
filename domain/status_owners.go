package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The actors of the controllers that write Machine and Tenant status, as
// they sign their events. Each controller declares its own constant (a test
// beside it holds it equal to the one here): domain cannot import them.
const (
	ActorHealth      = "system:health"
	ActorApplyWorker = "system:apply-worker"
	ActorUpgradeSaga = "system:upgrade-saga"
	ActorConfigSync  = "system:config-sync"
	ActorPKI         = "system:pki"
)

// StatusOwners says, for each kind whose status more than one controller
// writes, which controller writes each part of it: kind -> field -> actor.
// A field is the status field's JSON name; the conditions are owned by type,
// as "conditions[Type]", the way Kubernetes splits a shared conditions list.
// Decide refuses a status update by a controller (an actor named system:…)
// that changes a part it does not own, unless StatusWritesToMove lists the
// write; a controller that needs another's part changed asks its owner
// through an event (the owner watches for it), as COSI's outputs have one
// writer each. A person writing status through the API is not held to it:
// correcting a status by hand is theirs to do.
var StatusOwners = map[string]map[string]string{
	MachineKind.Kind: {
		"stage":                                ActorHealth,
		"ready":                                ActorHealth,
		"talosVersion":                         ActorHealth,
		"schematic":                            ActorHealth,
		"extensions":                           ActorHealth,
		"node":                                 ActorHealth,
		"lastSeen":                             ActorHealth,
		"firstHealthy":                         ActorHealth,
		"conditions[" + ConditionHealthy + "]": ActorHealth,
		"configUpToDate":                       ActorConfigSync,
		"conditions[" + ConditionConfigApplied + "]": ActorConfigSync,
		"configWait": ActorConfigSync,
	},
	TenantKind.Kind: {
		"phase":                                ActorApplyWorker,
		"observedGeneration":                   ActorApplyWorker,
		"endpointAddress":                      ActorApplyWorker,
		"kubernetesVersion":                    ActorApplyWorker,
		"drift":                                ActorApplyWorker,
		"conditions[Reconciled]":               ActorApplyWorker,
		"conditions[Bootstrapped]":             ActorApplyWorker,
		"conditions[" + ConditionDrifted + "]": ActorApplyWorker,
		"machines":                             ActorHealth,
		"conditions[" + ConditionHealthy + "]": ActorHealth,
		"certificates":                         ActorPKI,
		"conditions[" + ConditionCertificatesExpiring + "]": ActorPKI,
	},
}

// StatusWriteToMove is a write of a status part by a controller that does
// not own it, allowed until it moves to the owner: Move says how.
type StatusWriteToMove struct {
	Kind, Field, Actor string
	Move               string
}

// StatusWritesToMove are the writes of another controller's status parts
// that are still made in place. The list only shrinks: a new one is refused
// by Decide and by the owners' test.
var StatusWritesToMove = []StatusWriteToMove{
	// Every config apply records through talos.ConfigRecorder, as its own actor.
	{MachineKind.Kind, "configUpToDate", ActorApplyWorker, "day-0, metal and drift-correction applies should hand the machine to the config controller (as drift correction does through ConfigDrift) and let it record"},
	{MachineKind.Kind, "conditions[" + ConditionConfigApplied + "]", ActorApplyWorker, "as configUpToDate"},
	{MachineKind.Kind, "configUpToDate", ActorUpgradeSaga, "a Kubernetes upgrade's config apply should be recorded by the config controller"},
	{MachineKind.Kind, "conditions[" + ConditionConfigApplied + "]", ActorUpgradeSaga, "as configUpToDate"},
	// The apply worker marks a metal machine Installing, and resets the
	// health of a machine it replaced (remediation's startupTimeout runs
	// again from there).
	{MachineKind.Kind, "stage", ActorApplyWorker, "Installing: health should report a machine in maintenance mode; the replacement reset: health should start afresh on a machine whose Remediation says Replaced"},
	{MachineKind.Kind, "ready", ActorApplyWorker, "as stage (the replacement reset)"},
	{MachineKind.Kind, "node", ActorApplyWorker, "as stage (the replacement reset)"},
	{MachineKind.Kind, "firstHealthy", ActorApplyWorker, "as stage (the replacement reset)"},
	{MachineKind.Kind, "conditions[" + ConditionHealthy + "]", ActorApplyWorker, "as stage (the replacement reset)"},
	// Health moves a Ready tenant to Degraded and back.
	{TenantKind.Kind, "phase", ActorHealth, "Degraded should be read from conditions[Healthy] by the phase's owner"},
	// A Kubernetes upgrade that succeeded moves the version the configs carry.
	{TenantKind.Kind, "kubernetesVersion", ActorUpgradeSaga, "not from the Succeeded event: the configs must carry the new version before the run is recorded Succeeded, or the config controller renders the old one again; the apply worker should set it only at the bootstrap and the saga own it after, once the bootstrap's write can be told apart"},
	// The apply worker counts the machines from the read model after a run.
	{TenantKind.Kind, "machines", ActorApplyWorker, "the worker's Observer probe already writes them; it stays while a probe of a tenant without machines would mark it Degraded"},
}

// StatusOwner is who writes field of kind's status ("" when nobody is declared).
func StatusOwner(kind, field string) string {
	return StatusOwners[kind][field]
}

// CheckStatusWrite is CheckStatusOwners on the statuses of the object at
// ref as its kind normalizes them, so that a field a later release defaults
// is not taken for a change by whoever writes next. eventstore.UpdateStatus,
// the path every controller writes status through, runs it.
func CheckStatusWrite(ref Ref, actor string, before, after json.RawMessage) error {
	kind, ok := LookupKind(ref.Kind)
	if !ok || StatusOwners[kind.Kind] == nil || !strings.HasPrefix(actor, "system:") {
		return nil
	}
	if n, causes := kind.NormalizeStatus(before); len(causes) == 0 {
		before = n
	}
	if n, causes := kind.NormalizeStatus(after); len(causes) == 0 {
		after = n
	}
	return CheckStatusOwners(kind.Kind, ref.Name, actor, before, after)
}

// CheckStatusOwners refuses a status update by actor that changes a part of
// kind's status another controller owns: one cause per such part, naming the
// field and its owner. before and after are the stored and the new status
// (normalized JSON). Kinds without owners, and actors that are not
// controllers (not system:…), pass.
func CheckStatusOwners(kind, name, actor string, before, after json.RawMessage) error {
	owners, ok := StatusOwners[kind]
	if !ok || !strings.HasPrefix(actor, "system:") {
		return nil
	}
	changed, err := ChangedStatusFields(before, after)
	if err != nil {
		return nil // Normalize has checked after; a stored status that is not an object has no parts
	}
	var causes []Cause
	for _, f := range changed {
		owner := owners[f]
		if owner == actor || statusWriteToMove(kind, f, actor) {
			continue
		}
		msg := "is written by " + owner + ", not " + actor
		if owner == "" {
			msg = "has no declared writer (domain.StatusOwners), so " + actor + " may not write it"
		}
		causes = append(causes, Cause{Field: field.NewPath("status").Child(f).String(), Type: CauseForbidden, Message: msg})
	}
	if len(causes) == 0 {
		return nil
	}
	parts := make([]string, len(causes))
	for i, c := range causes {
		parts[i] = c.Field + " " + c.Message
	}
	e := NewForbidden(kind, name, strings.Join(parts, "; "))
	e.Causes = causes
	return e
}

func statusWriteToMove(kind, field, actor string) bool {
	return slices.ContainsFunc(StatusWritesToMove, func(w StatusWriteToMove) bool {
		return w.Kind == kind && w.Field == field && w.Actor == actor
	})
}

// ChangedStatusFields lists the parts of a status that differ between before
// and after, sorted: top-level fields by JSON name (one present on one side
// only counts) and conditions by type, as "conditions[Type]".
func ChangedStatusFields(before, after json.RawMessage) ([]string, error) {
	a, err := statusParts(before)
	if err != nil {
		return nil, err
	}
	b, err := statusParts(after)
	if err != nil {
		return nil, err
	}
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// statusParts splits a status into its parts' JSON: each top-level field but
// conditions, and each condition by type.
func statusParts(raw json.RawMessage) (map[string]json.RawMessage, error) {
	parts := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return parts, nil
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("decoding a status: %w", err)
	}
	conds, ok := parts["conditions"]
	if !ok {
		return parts, nil
	}
	delete(parts, "conditions")
	var list []json.RawMessage
	if err := json.Unmarshal(conds, &list); err != nil {
		return nil, fmt.Errorf("decoding a status's conditions: %w", err)
	}
	for _, c := range list {
		var t struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(c, &t); err != nil {
			return nil, fmt.Errorf("decoding a status's condition: %w", err)
		}
		parts["conditions["+t.Type+"]"] = c
	}
	return parts, nil
}
