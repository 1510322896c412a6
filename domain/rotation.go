package domain

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Secrets an Upgrade's spec.rotate may name. Each is rotated as Talos's own
// config can express it: the CAs through machine.acceptedCAs /
// cluster.acceptedCAs in three stages (accept the new, make it issue with the
// old accepted, drop the old), the others in one swap.
const (
	// SecretTalosCA is the Talos API (OS) CA: machine.ca, machine.acceptedCAs.
	SecretTalosCA = "talos-ca"
	// SecretKubernetesCA is the Kubernetes CA: cluster.ca, cluster.acceptedCAs;
	// every kubelet, component and admin certificate is issued from it again.
	SecretKubernetesCA = "kubernetes-ca"
	// SecretAggregatorCA is the front-proxy CA: cluster.aggregatorCA. Talos
	// has no accepted list for it, so it is swapped in one stage.
	SecretAggregatorCA = "aggregator-ca"
	// SecretBootstrapToken is cluster.token (the kubelet bootstrap token) and
	// machine.token (the trustd join token).
	SecretBootstrapToken = "bootstrap-token"

	// Refused: Talos's config cannot keep the old one working while the new
	// one takes over, so rotating them would break the cluster.
	SecretEtcdCA            = "etcd-ca"
	SecretServiceAccountKey = "service-account-key"
	SecretEncryptionKey     = "encryption-key"
	// SecretAll stands for every secret that can be rotated.
	SecretAll = "all"
)

// RotatableSecrets are the secrets a rotation can take, in the order they are listed.
var RotatableSecrets = []string{SecretTalosCA, SecretKubernetesCA, SecretAggregatorCA, SecretBootstrapToken}

// refusedSecrets says why each secret RezusCloud does not rotate is refused.
var refusedSecrets = map[string]string{
	SecretEtcdCA: "Talos cannot rotate the etcd CA (siderolabs/talos#8808): its config has no accepted etcd CAs, " +
		"so members issued from a new CA would not talk to the others; the cluster would lose quorum",
	SecretServiceAccountKey: "Talos's config holds one service-account key (cluster.serviceAccount), used both to sign " +
		"and to verify, and kube-apiserver's --service-account-key-file cannot be extended (Talos denies it in extraArgs): " +
		"no stage can keep the old tokens valid while new ones are signed, so every pod's token would fail at once",
	SecretEncryptionKey: "Talos's config holds one secretbox key (cluster.secretboxEncryptionSecret) and always encrypts " +
		"with it; it cannot list the old key as read-only while Secrets are rewritten, so every stored Secret would become unreadable",
}

// Stages of a rotation, in order. A stage is done when every machine took
// the config it renders.
const (
	// RotationAccept: the new CAs are accepted beside the old ones, which still issue.
	RotationAccept = "accept"
	// RotationSwap: the new CAs and keys issue; the old CAs are still accepted.
	RotationSwap = "swap"
	// RotationDrop: the old CAs are no longer accepted.
	RotationDrop = "drop"
)

// RotationProgress is where a rotation run is: the stages it goes through
// and the one its machines are taking now.
type RotationProgress struct {
	Stages []string `json:"stages"`
	Stage  string   `json:"stage"`
}

// RotatesCA reports whether secrets include a CA, whose rotation takes three stages.
func RotatesCA(secrets []string) bool {
	return slices.Contains(secrets, SecretTalosCA) || slices.Contains(secrets, SecretKubernetesCA)
}

// RotationStages are the stages rotating secrets goes through: accept, swap
// and drop when a CA with an accepted list is among them, else only swap.
func RotationStages(secrets []string) []string {
	if RotatesCA(secrets) {
		return []string{RotationAccept, RotationSwap, RotationDrop}
	}
	return []string{RotationSwap}
}

// NextRotationStage is the stage after stage, or "" after the last.
func NextRotationStage(stages []string, stage string) string {
	i := slices.Index(stages, stage)
	if i < 0 || i+1 >= len(stages) {
		return ""
	}
	return stages[i+1]
}

// normalizeRotate expands "all" and orders the secrets as RotatableSecrets.
func normalizeRotate(secrets []string) []string {
	if len(secrets) == 0 {
		return nil
	}
	all := slices.Contains(secrets, SecretAll)
	out := make([]string, 0, len(secrets))
	for _, s := range RotatableSecrets {
		if all || slices.Contains(secrets, s) {
			out = append(out, s)
		}
	}
	for _, s := range secrets {
		if !slices.Contains(RotatableSecrets, s) && s != SecretAll {
			out = append(out, s) // left for Validate to name: "all" does not hide a refused one
		}
	}
	return out
}

// validateRotate reports every secret of spec.rotate that cannot be rotated.
func validateRotate(secrets []string, f *field.Path) []Cause {
	var causes []Cause
	seen := map[string]bool{}
	for i, s := range secrets {
		p := f.Index(i).String()
		switch why, refused := refusedSecrets[s]; {
		case refused:
			causes = append(causes, Cause{Field: p, Type: CauseNotSupported, Message: fmt.Sprintf("%s cannot be rotated: %s", s, why)})
		case !slices.Contains(RotatableSecrets, s):
			causes = append(causes, Cause{Field: p, Type: CauseNotSupported, Message: fmt.Sprintf("unknown secret %q: use %v or %q", s, RotatableSecrets, SecretAll)})
		case seen[s]:
			causes = append(causes, Cause{Field: p, Type: CauseDuplicate, Message: fmt.Sprintf("%q is listed twice", s)})
		}
		seen[s] = true
	}
	return causes
}

// Validate checks the progress the saga wrote.
func (p *RotationProgress) Validate(f *field.Path) []Cause {
	var causes []Cause
	for i, s := range p.Stages {
		causes = append(causes, oneOf(s, f.Child("stages").Index(i), RotationAccept, RotationSwap, RotationDrop)...)
	}
	if !slices.Contains(p.Stages, p.Stage) {
		causes = append(causes, Cause{Field: f.Child("stage").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not one of the run's stages %v", p.Stage, p.Stages)})
	}
	return causes
}
