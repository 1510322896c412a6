package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RemediationKind is one automatic replacement of an unhealthy machine:
// created by the remediation controller when a node group's
// spec.remediation says so, carried out by the apply worker (drain, etcd,
// replace), and finished by the controller when the new machine is
// healthy. Its status keeps every step.
var RemediationKind = register(&KindInfo{
	Kind: "Remediation", Plural: "remediations", Subject: "remediation", TenantScoped: true,
	NormalizeSpec: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[RemediationSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) {
		return normalizeAs[RemediationStatus](raw, "status")
	},
	InitialStatus: func() json.RawMessage { return json.RawMessage(`{"phase":"Pending"}`) },
})

// Remediation is the typed view of a Remediation object.
type Remediation struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   ObjectMeta        `json:"metadata"`
	Spec       RemediationSpec   `json:"spec"`
	Status     RemediationStatus `json:"status"`
}

// Remediation phases. Succeeded and Failed are final.
const (
	// RemediationPending: decided; the apply worker replaces the machine
	// at its next run (queued by this object's creation).
	RemediationPending = "Pending"
	// RemediationReplacing: the apply worker drains the machine, removes
	// its etcd member (a control plane), and replaces it with tofu.
	RemediationReplacing = "Replacing"
	// RemediationJoining: the new machine is built; the controller waits
	// for it to be healthy (its Node Ready) within startupTimeout.
	RemediationJoining   = "Joining"
	RemediationSucceeded = "Succeeded"
	RemediationFailed    = "Failed"
)

// MaxRemediationSteps bounds the steps a remediation records.
const MaxRemediationSteps = 32

// RemediationSpec says which machine is replaced and why.
type RemediationSpec struct {
	NodeGroup string `json:"nodeGroup"`
	Machine   string `json:"machine"`
	Role      string `json:"role"`
	// Reason is why the machine was found unhealthy (the probe's words).
	Reason string `json:"reason"`
	// UnhealthySince is when the machine was last seen healthy (or was
	// created, for one that never became healthy).
	UnhealthySince time.Time `json:"unhealthySince"`
}

// Default does nothing: the controller writes every field.
func (s *RemediationSpec) Default() {}

// Validate reports every bad field.
func (s *RemediationSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := ValidateName(s.NodeGroup, f.Child("nodeGroup").String())
	causes = append(causes, ValidateName(s.Machine, f.Child("machine").String())...)
	causes = append(causes, oneOf(s.Role, f.Child("role"), RoleControlPlane, RoleWorker)...)
	if len(s.Reason) > 1024 {
		causes = append(causes, Cause{Field: f.Child("reason").String(), Type: CauseTooLong, Message: "must be no more than 1024 characters"})
	}
	return causes
}

// RemediationStep is one step of a remediation, as it ended or began.
type RemediationStep struct {
	// Name is Detected, Drained, EtcdMemberRemoved, NodeDeleted, Replaced,
	// Joined or Failed.
	Name    string    `json:"name"`
	Time    time.Time `json:"time"`
	Message string    `json:"message,omitempty"`
}

// RemediationStatus is how the replacement went.
type RemediationStatus struct {
	Phase string `json:"phase"`
	// Apply is the apply that replaced the machine.
	Apply string `json:"apply,omitempty"`
	// StateSerial is the TF state's serial when the apply worker began the
	// replacement: a run resumed after a crash that finds a newer state
	// knows the replacement was written and does not replace the new
	// machine again.
	StateSerial int64             `json:"stateSerial,omitempty"`
	Steps       []RemediationStep `json:"steps,omitempty"`
	Message     string            `json:"message,omitempty"`
	ReplacedAt  *time.Time        `json:"replacedAt,omitempty"`
	FinishedAt  *time.Time        `json:"finishedAt,omitempty"`
	// Wait is what the remediation waits for while Joining (the new
	// machine to be healthy, by startupTimeout); cleared when it ends.
	// Records written before it existed have none and read as before.
	Wait *StepWait `json:"wait,omitempty"`
	// Replica is the replica that ran the current step: the remediation
	// controller's when it detects and watches the join, the apply
	// worker's while it replaces the machine.
	Replica string `json:"replica,omitempty"`
}

// Default fills the phase in.
func (s *RemediationStatus) Default() {
	if s.Phase == "" {
		s.Phase = RemediationPending
	}
}

// Validate checks the status a controller wrote.
func (s *RemediationStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Phase, f.Child("phase"), RemediationPending, RemediationReplacing, RemediationJoining, RemediationSucceeded, RemediationFailed)
	if len(s.Steps) > MaxRemediationSteps {
		causes = append(causes, Cause{Field: f.Child("steps").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d steps", MaxRemediationSteps)})
	}
	if len(s.Message) > 4096 {
		causes = append(causes, Cause{Field: f.Child("message").String(), Type: CauseTooLong, Message: "must be no more than 4096 characters"})
	}
	if s.Wait != nil {
		causes = append(causes, s.Wait.Validate(f.Child("wait"))...)
	}
	return causes
}

// Finished reports whether the remediation is over.
func (s *RemediationStatus) Finished() bool {
	return s.Phase == RemediationSucceeded || s.Phase == RemediationFailed
}

// AddStep appends a step, keeping the newest MaxRemediationSteps.
func (s *RemediationStatus) AddStep(name, message string, now time.Time) {
	s.Steps = append(s.Steps, RemediationStep{Name: name, Time: now.UTC().Truncate(time.Second), Message: message})
	if n := len(s.Steps); n > MaxRemediationSteps {
		s.Steps = s.Steps[n-MaxRemediationSteps:]
	}
}
