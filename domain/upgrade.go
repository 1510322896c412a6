package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// UpgradeKind is one rolling Talos upgrade of a tenant's machines: the target
// version, which node groups, and, in its status, the upgrade saga's progress
// machine by machine. A tenant runs one upgrade at a time; others wait Pending
// in creation order.
var UpgradeKind = register(&KindInfo{
	Kind: "Upgrade", Plural: "upgrades", Subject: "upgrade", TenantScoped: true,
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[UpgradeSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[UpgradeStatus](raw, "status") },
	InitialStatus:   func() json.RawMessage { return json.RawMessage(`{"phase":"Pending"}`) },
	SpecEvent:       upgradeSpecEvent,
})

// Upgrade is the typed view of an Upgrade object.
type Upgrade struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   ObjectMeta    `json:"metadata"`
	Spec       UpgradeSpec   `json:"spec"`
	Status     UpgradeStatus `json:"status"`
}

// Upgrade run phases. Succeeded, Failed and Canceled are final.
const (
	UpgradePending   = "Pending"
	UpgradeRunning   = "Running"
	UpgradeSucceeded = "Succeeded"
	UpgradeFailed    = "Failed"
	UpgradeCanceled  = "Canceled"
)

// Phases of one machine in a run, in the order a step goes through them.
// Done, RolledBack and Failed are final.
const (
	StepPending = "Pending"
	// StepDraining: the machine's Node is cordoned and its pods evicted
	// before the node is touched (skipped when its group opts out).
	StepDraining    = "Draining"
	StepUpgrading   = "Upgrading"
	StepRebooting   = "Rebooting"
	StepVerifying   = "Verifying"
	StepRollingBack = "RollingBack"
	StepDone        = "Done"
	StepRolledBack  = "RolledBack"
	StepFailed      = "Failed"
)

// Bounds of an upgrade's status, so one run stays well inside an event.
const (
	MaxUpgradeMachines    = 4000
	MaxUpgradeReasonBytes = 4 << 10
	MaxUpgradeErrorBytes  = 2 << 10
)

// UpgradeSpec says what to upgrade to: exactly one of TalosVersion (a
// rolling Talos upgrade through the installer) and KubernetesVersion (new
// control-plane component and kubelet images through each machine's config,
// as `talosctl upgrade-k8s` does).
type UpgradeSpec struct {
	// TalosVersion is the target Talos version, e.g. v1.13.1.
	TalosVersion string `json:"talosVersion,omitempty"`
	// KubernetesVersion is the target Kubernetes version, e.g. v1.36.1.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Rotate names the secrets to rotate instead (talos-ca, kubernetes-ca,
	// aggregator-ca, bootstrap-token, or all): every machine of the tenant
	// takes configs with the new ones, stage by stage (docs/rotation.md).
	Rotate []string `json:"rotate,omitempty"`
	// NodeGroups narrows the run to these groups; empty means every machine of the tenant.
	NodeGroups []string `json:"nodeGroups,omitempty"`
	// MaxParallelism is how many workers are upgraded at once; default 1.
	// Control planes are always upgraded one at a time.
	MaxParallelism int `json:"maxParallelism"`
	// NoDrain skips the cordon and drain of every machine of this run (the
	// node groups' own drain setting counts otherwise).
	NoDrain bool `json:"noDrain,omitempty"`
	// CancelRequested is set by POST .../cancel: the run stops after the
	// machine it is upgrading. It cannot be unset.
	CancelRequested bool `json:"cancelRequested,omitempty"`
	// Now starts machines outside the tenant's maintenance windows (an
	// explicit override, recorded with the Upgrade's creation in the audit
	// log); otherwise each machine starts only inside a window.
	Now bool `json:"now,omitempty"`
	// Reimage marks a run the saga started because a node group's schematic
	// changed: its machines are installed again at the Talos version they
	// run, from their group's new installer.
	Reimage bool `json:"reimage,omitempty"`
	// Deadlines overrides how long each step of a machine may wait before
	// it fails (and the machine is rolled back); absent steps take the
	// server's defaults.
	Deadlines *UpgradeDeadlines `json:"deadlines,omitempty"`
}

// UpgradeDeadlines are per-step deadlines of an Upgrade: Go durations
// between MinStepDeadline and MaxStepDeadline, "" for the server's default
// (the defaults are in docs/upgrades.md).
type UpgradeDeadlines struct {
	// Precheck bounds the wait for the node to answer before it is touched
	// and, for a control plane, for etcd to keep quorum without it (default 5m).
	Precheck string `json:"precheck,omitempty"`
	// Reboot bounds the wait for the node to install, go down and come back
	// on the target (default 20m); a rollback's wait takes it too.
	Reboot string `json:"reboot,omitempty"`
	// Verify bounds the wait for the node to be healthy on the target: its
	// services, etcd member and, for Kubernetes runs, its API server and
	// kubelet answering the target (default 10m).
	Verify string `json:"verify,omitempty"`
}

// Duration is the deadline of step ("precheck", "reboot", "verify") the
// spec sets, or def when it sets none.
func (d *UpgradeDeadlines) Duration(step string, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	v := map[string]string{"precheck": d.Precheck, "reboot": d.Reboot, "verify": d.Verify}[step]
	if x, err := time.ParseDuration(v); err == nil && v != "" {
		return x
	}
	return def
}

// Default fills in maxParallelism 1, a leading "v" and the node groups in order.
func (s *UpgradeSpec) Default() {
	if s.MaxParallelism == 0 {
		s.MaxParallelism = 1
	}
	if _, ok := ParseVersion(s.TalosVersion); ok {
		s.TalosVersion = canonicalVersion(s.TalosVersion)
	}
	if _, ok := ParseVersion(s.KubernetesVersion); ok {
		s.KubernetesVersion = canonicalVersion(s.KubernetesVersion)
	}
	if len(s.NodeGroups) == 0 {
		s.NodeGroups = nil
	}
	sort.Strings(s.NodeGroups)
	s.Rotate = normalizeRotate(s.Rotate)
}

// Validate reports every bad field.
func (s *UpgradeSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	var causes []Cause
	switch {
	case len(s.Rotate) > 0:
		causes = append(causes, validateRotate(s.Rotate, f.Child("rotate"))...)
		if s.TalosVersion != "" || s.KubernetesVersion != "" {
			causes = append(causes, Cause{Field: f.Child("rotate").String(), Type: CauseForbidden,
				Message: "a rotation moves no version: give rotate, or talosVersion / kubernetesVersion, not both"})
		}
		if len(s.NodeGroups) > 0 {
			causes = append(causes, Cause{Field: f.Child("nodeGroups").String(), Type: CauseForbidden,
				Message: "a rotation covers every machine of the tenant: each must trust the new CAs before any uses them"})
		}
		if s.Reimage {
			causes = append(causes, Cause{Field: f.Child("reimage").String(), Type: CauseForbidden, Message: "a rotation installs nothing"})
		}
	case s.TalosVersion == "" && s.KubernetesVersion == "":
		causes = append(causes, Cause{Field: f.Child("talosVersion").String(), Type: CauseRequired,
			Message: "give the target: talosVersion (e.g. v1.13.1) or kubernetesVersion (e.g. v1.36.1), or the secrets to rotate"})
	case s.TalosVersion != "" && s.KubernetesVersion != "":
		causes = append(causes, Cause{Field: f.Child("kubernetesVersion").String(), Type: CauseForbidden,
			Message: "an upgrade moves either Talos or Kubernetes: give talosVersion or kubernetesVersion, not both (create two upgrades; they run one after the other)"})
	}
	if s.TalosVersion != "" {
		causes = append(causes, validateVersion(s.TalosVersion, f.Child("talosVersion"))...)
	}
	if s.KubernetesVersion != "" {
		causes = append(causes, validateVersion(s.KubernetesVersion, f.Child("kubernetesVersion"))...)
	}
	for i, ng := range s.NodeGroups {
		p := f.Child("nodeGroups").Index(i).String()
		causes = append(causes, ValidateName(ng, p)...)
		if i > 0 && s.NodeGroups[i-1] == ng {
			causes = append(causes, Cause{Field: p, Type: CauseDuplicate, Message: fmt.Sprintf("node group %q is listed twice", ng)})
		}
	}
	if d := s.Deadlines; d != nil {
		causes = append(causes, ValidateStepDeadline(d.Precheck, f.Child("deadlines", "precheck"))...)
		causes = append(causes, ValidateStepDeadline(d.Reboot, f.Child("deadlines", "reboot"))...)
		causes = append(causes, ValidateStepDeadline(d.Verify, f.Child("deadlines", "verify"))...)
	}
	if mp := s.MaxParallelism; mp < 1 || mp > MaxNodeGroupCount {
		causes = append(causes, Cause{Field: f.Child("maxParallelism").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxNodeGroupCount, mp)})
	}
	return causes
}

// Kubernetes reports whether the run moves Kubernetes (else Talos, or a rotation).
func (s *UpgradeSpec) Kubernetes() bool { return s.KubernetesVersion != "" }

// Rotation reports whether the run rotates secrets instead of moving a version.
func (s *UpgradeSpec) Rotation() bool { return len(s.Rotate) > 0 }

// Target is the version the run moves machines to; for a rotation, the
// rotated secrets.
func (s *UpgradeSpec) Target() string {
	if s.Rotation() {
		return "rotated " + strings.Join(s.Rotate, ", ")
	}
	if s.Kubernetes() {
		return s.KubernetesVersion
	}
	return s.TalosVersion
}

// Includes reports whether the run covers machines of node group ng.
func (s *UpgradeSpec) Includes(ng string) bool {
	return len(s.NodeGroups) == 0 || slices.Contains(s.NodeGroups, ng)
}

// UpgradeMachine is one machine's step of a run.
type UpgradeMachine struct {
	Name      string `json:"name"`
	NodeGroup string `json:"nodeGroup,omitempty"`
	Role      string `json:"role"`
	// From is the version the machine ran when the run was planned; To the target.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// FromSchematic is the Image Factory schematic the machine ran when the
	// run was planned; ToSchematic the one its node group declares, which
	// the run installs with the target ("" when the group names its own
	// installImage: then only the version counts).
	FromSchematic string `json:"fromSchematic,omitempty"`
	ToSchematic   string `json:"toSchematic,omitempty"`
	Phase         string `json:"phase"`
	// Started is when its upgrade call was made; Finished when it reached a final phase.
	Started  *time.Time `json:"started,omitempty"`
	Finished *time.Time `json:"finished,omitempty"`
	// Error says why the step failed (and what the rollback did).
	Error string `json:"error,omitempty"`
	// Message is the step's progress in words, e.g. "Draining (4 pods left)".
	Message string `json:"message,omitempty"`
	// Wait is what the step waits for while it waits (precheck, reboot,
	// verification, rollback), with its deadline; cleared when it is over.
	Wait *StepWait `json:"wait,omitempty"`
	// Replica is the replica that last carried the step on: a step taken up
	// by another replica after a failover names the new one. Empty while
	// the step has not started.
	Replica string `json:"replica,omitempty"`
}

// SchematicMatches reports whether a machine that reports schematic
// observed runs the schematic want: any, when want is "" (an explicit
// installImage); a node that reports none runs an image the factory did not
// build, which counts as the vanilla one.
func SchematicMatches(observed, want string) bool {
	if observed == "" {
		observed = VanillaSchematic
	}
	return want == "" || observed == want
}

// Final reports whether the machine's step is over.
func (m *UpgradeMachine) Final() bool {
	return m.Phase == StepDone || m.Phase == StepRolledBack || m.Phase == StepFailed
}

// UpgradeStatus is how the run goes, written by the upgrade saga. Every
// change is an event, so the stream holds the run step by step.
type UpgradeStatus struct {
	Phase string `json:"phase"`
	// Machines is the plan in the order it is carried out: control planes
	// first (the etcd leader last of them), then workers.
	Machines []UpgradeMachine `json:"machines,omitempty"`
	// Current names the machine being upgraded (comma-separated when workers
	// go in parallel); empty between steps.
	Current string `json:"current,omitempty"`
	// Reason explains a Failed or Canceled run (or a Pending one that waits).
	Reason    string     `json:"reason,omitempty"`
	StartTime *time.Time `json:"startTime,omitempty"`
	EndTime   *time.Time `json:"endTime,omitempty"`
	// MaintenanceOpensAt is set while the run waits, no machine under
	// way, for the tenant's maintenance window that opens then.
	MaintenanceOpensAt *time.Time `json:"maintenanceOpensAt,omitempty"`
	// Rotation is the stage a rotation run is in; its machines' steps are
	// those of that stage (each stage starts them all Pending again).
	Rotation *RotationProgress `json:"rotation,omitempty"`
}

// HoldsBack reports whether the run holds back the tenant's applies and
// config changes: it is not over and is not waiting between machines for
// a maintenance window (a wait may last days; what the run changes is
// only ever the machine under way).
func (s *UpgradeStatus) HoldsBack() bool {
	return !s.Final() && !(s.MaintenanceOpensAt != nil && s.Current == "")
}

// Final reports whether the run is over.
func (s *UpgradeStatus) Final() bool {
	return s.Phase == UpgradeSucceeded || s.Phase == UpgradeFailed || s.Phase == UpgradeCanceled
}

// Default fills in a Pending phase.
func (s *UpgradeStatus) Default() {
	if s.Phase == "" {
		s.Phase = UpgradePending
	}
}

// Validate checks the status the saga wrote.
func (s *UpgradeStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Phase, f.Child("phase"), UpgradePending, UpgradeRunning, UpgradeSucceeded, UpgradeFailed, UpgradeCanceled)
	if len(s.Reason) > MaxUpgradeReasonBytes {
		causes = append(causes, Cause{Field: f.Child("reason").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxUpgradeReasonBytes)})
	}
	if s.Rotation != nil {
		causes = append(causes, s.Rotation.Validate(f.Child("rotation"))...)
	}
	if len(s.Machines) > MaxUpgradeMachines {
		return append(causes, Cause{Field: f.Child("machines").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d machines", MaxUpgradeMachines)})
	}
	seen := map[string]bool{}
	for i, m := range s.Machines {
		p := f.Child("machines").Index(i)
		causes = append(causes, ValidateName(m.Name, p.Child("name").String())...)
		if seen[m.Name] {
			causes = append(causes, Cause{Field: p.Child("name").String(), Type: CauseDuplicate, Message: fmt.Sprintf("machine %q is listed twice", m.Name)})
		}
		seen[m.Name] = true
		causes = append(causes, oneOf(m.Role, p.Child("role"), RoleControlPlane, RoleWorker)...)
		if m.From != "" {
			causes = append(causes, validateVersion(m.From, p.Child("from"))...)
		}
		causes = append(causes, validateVersion(m.To, p.Child("to"))...)
		for _, s := range []struct{ field, id string }{{"fromSchematic", m.FromSchematic}, {"toSchematic", m.ToSchematic}} {
			if s.id != "" && !validSchematicID(s.id) {
				causes = append(causes, Cause{Field: p.Child(s.field).String(), Type: CauseInvalid, Message: "must be a schematic ID: 64 lower-case hex digits"})
			}
		}
		causes = append(causes, oneOf(m.Phase, p.Child("phase"), StepPending, StepDraining, StepUpgrading, StepRebooting, StepVerifying, StepRollingBack, StepDone, StepRolledBack, StepFailed)...)
		if len(m.Error) > MaxUpgradeErrorBytes {
			causes = append(causes, Cause{Field: p.Child("error").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxUpgradeErrorBytes)})
		}
		if len(m.Message) > MaxUpgradeErrorBytes {
			causes = append(causes, Cause{Field: p.Child("message").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxUpgradeErrorBytes)})
		}
		if m.Wait != nil {
			causes = append(causes, m.Wait.Validate(p.Child("wait"))...)
		}
	}
	return causes
}

// upgradeSpecEvent names a change that only set cancelRequested UpgradeCancelRequested.
func upgradeSpecEvent(old, new json.RawMessage) string {
	var a, b UpgradeSpec
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(new, &b) != nil || a.CancelRequested || !b.CancelRequested {
		return ""
	}
	a.CancelRequested = true
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	if string(x) == string(y) {
		return "UpgradeCancelRequested"
	}
	return ""
}

// UpgradePathProblem says why a machine running from cannot be upgraded to
// to in one run, or "" when it can. Talos supports upgrades to the next minor
// version at most, and patch-level moves within a minor version; going back
// across a minor version is a downgrade Talos does not support.
func UpgradePathProblem(from, to string) string {
	f, ok := ParseVersion(from)
	if !ok {
		return fmt.Sprintf("%q is not a semantic version", from)
	}
	t, ok := ParseVersion(to)
	if !ok {
		return fmt.Sprintf("%q is not a semantic version", to)
	}
	from, to = canonicalVersion(from), canonicalVersion(to)
	switch {
	case f.Major != t.Major:
		return fmt.Sprintf("%s to %s changes the major version, which Talos does not support", from, to)
	case t.Minor < f.Minor:
		return fmt.Sprintf("%s to %s is a downgrade across a minor version; only patch versions can go back (v%d.%d.x)", from, to, f.Major, f.Minor)
	case t.Minor > f.Minor+1:
		return fmt.Sprintf("%s to %s skips a minor version; upgrade to v%d.%d.x first", from, to, f.Major, f.Minor+1)
	}
	return ""
}
